"""The `rlguard` command's errors: one line saying what is wrong and what to do, a non-zero exit,
and Python's traceback only with --debug."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.hook.hookutil import ROOT, child_env


def _rlguard(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlguard", *args],
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_cli_import_of_a_missing_file_says_so_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.log"
    result = _rlguard("import", str(missing), "--url", "http://127.0.0.1:9")
    assert result.returncode == 1
    assert result.stderr == (
        f"rlguard import: no such file or directory: {missing}; check the path and try again\n"
    )
    forced = _rlguard("import", str(missing), "--format", "csv", "--url", "http://127.0.0.1:9")
    assert forced.stderr == result.stderr  # refused before a run is made for it
    for debug in (["--debug", "import", str(missing)], ["import", str(missing), "--debug"]):
        traced = _rlguard(*debug, "--url", "http://127.0.0.1:9")
        assert traced.returncode == 1
        assert traced.stderr.startswith("Traceback (most recent call last):")
        assert traced.stderr.endswith(
            f"FileNotFoundError: [Errno 2] No such file or directory: '{missing}'\n"
        )


def test_cli_up_on_a_busy_port_says_so_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        database = f"sqlite:///{tmp_path / 'rlguard.db'}"
        result = _rlguard("up", "--port", str(port), RLGUARD_DATABASE_URL=database)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"rlguard up: port {port} is already in use by another process: stop that process, "
        "or choose another port with --port"
    )
    assert "Traceback" not in result.stderr


def test_cli_follow_help_explains_its_timing_options() -> None:
    result = _rlguard("follow", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "--poll-s POLL_S seconds between looks for new lines or event files" in text
    assert "--exit-after-idle-s EXIT_AFTER_IDLE_S finish the run after this many seconds" in text
    assert "--debug on an error, show Python's traceback instead of one line" in text

"""`rlguard doctor` against real services: what passes, and each failure saying what to do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rlguard_backend.core import auth
from rlguard_backend.core.app import create_app
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import write_session
from rlguard_backend.core.serve import ServerThread
from tests.hook.hookutil import ROOT, ServiceProcess, child_env, free_port


def doctor(*args: str) -> tuple[int, list[str]]:
    result = subprocess.run(
        [sys.executable, "-m", "rlguard", "doctor", *args],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    return result.returncode, result.stdout.splitlines()


def test_doctor_healthy_service_passes_every_check(service: ServiceProcess, tmp_path: Path) -> None:
    (tmp_path / "spool" / "old-run").mkdir(parents=True)
    (tmp_path / "spool" / "old-run" / "000-p1-x.batch").write_bytes(b"")
    code, lines = doctor("--url", service.url, "--spool-dir", str(tmp_path / "spool"))
    assert code == 0, lines
    assert [line.split()[0] for line in lines] == ["ok", "ok", "ok", "ok", "ok", "warn"]
    assert "sqlite database" in lines[0]
    assert "schema at" in lines[1] and "clock within" in lines[2]
    assert lines[3].endswith("no token needed here")
    assert "1 spooled batch(es)" in lines[5] and "rlguard sync" in lines[5]


def test_doctor_unreachable_service_fails_with_the_fix(tmp_path: Path) -> None:
    code, lines = doctor("--url", f"http://127.0.0.1:{free_port()}", "--spool-dir", str(tmp_path))
    assert code == 1
    assert lines[0].startswith("FAIL") and "rlguard up" in lines[0]


def test_doctor_token_checks_scope(sqlite_url: str, tmp_path: Path) -> None:
    app = create_app(Settings(database_url=sqlite_url, auth="on"))
    with write_session(app.state.session_factory) as session:
        read = auth.issue(session, "viewer", auth.Scope.read)[1]
        write = auth.issue(session, "trainer", auth.Scope.write)[1]
        session.commit()
    with ServerThread(app) as server:
        spool = ["--spool-dir", str(tmp_path)]
        assert doctor("--url", server.url, "--token", write, *spool)[0] == 0
        code, lines = doctor("--url", server.url, "--token", read, *spool)
        assert code == 1 and any("token cannot write" in line for line in lines)
        code, lines = doctor("--url", server.url, *spool)
        assert code == 1 and any("token refused" in line for line in lines)
    app.state.engine.dispose()

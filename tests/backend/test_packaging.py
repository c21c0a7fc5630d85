"""The wheel carries everything the service needs: built, installed in a fresh venv, started."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
import venv
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 90


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # setuptools builds in ROOT/build and keeps what it copied there before: a renamed
    # migration would ship twice
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path_factory.mktemp("build-cwd"),
    )
    (built,) = out.glob("rlguard-*.whl")
    return built


def test_wheel_contains_migrations_and_all_packages(wheel: Path) -> None:
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "rlguard/__init__.py",
        "rlguard/cli.py",
        "rlguard_backend/core/app.py",
        "rlguard_backend/migrations/env.py",
        "rlguard_backend/migrations/script.py.mako",
        "rlguard_backend/migrations/versions/0001_initial_schema.py",
        "rlguard_frontend/app.py",
        "rlguard_frontend/pages/runs/page.py",
        "rlguard_compose/serve.py",
    ):
        assert required in names, required
    assert not any(name.startswith(("tests/", "benchmarks/")) for name in names)


def _fresh_venv_with_wheel(wheel: Path, where: Path) -> Path:
    """A new venv holding only the wheel; its dependencies come from this interpreter's site."""
    venv.create(where, with_pip=True)
    python = where / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # Offline and fast: reuse the already installed third-party packages through a .pth file.
    # Only real site directories process .pth files, so the editable rlguard here stays invisible.
    Path(site, "deps-from-test-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
    )
    return where / "bin"


def test_wheel_installed_in_fresh_venv_serves_empty_database(wheel: Path, tmp_path: Path) -> None:
    bin_dir = _fresh_venv_with_wheel(wheel, tmp_path / "venv")
    where = subprocess.run(
        [str(bin_dir / "python"), "-c", "import rlguard_backend; print(rlguard_backend.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout
    assert str(tmp_path / "venv") in where
    env = {**os.environ, "RLGUARD_DATABASE_URL": f"sqlite:///{tmp_path / 'fresh.db'}"}
    process = subprocess.Popen(
        [str(bin_dir / "rlguard"), "up", "--port", "0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = _announced_url(process)
        health = httpx.get(f"{url}/api/v1/health", timeout=10).json()
        assert (health["status"], health["database"]) == ("ok", "sqlite")
        assert httpx.get(f"{url}/api/v1/runs", timeout=10).json() == {"data": [], "count": 0}
        assert "rlguard" in httpx.get(f"{url}/", timeout=10).text
    finally:
        process.terminate()
        process.wait(timeout=30)


def _announced_url(process: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    assert process.stdout is not None
    seen = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            break
        seen.append(line)
        if "listening on" in line:
            return line.split("listening on ", 1)[1].split()[0]
    raise AssertionError(f"rlguard up did not announce its URL: {''.join(seen)}")

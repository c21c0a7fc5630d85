"""`rlguard db backup`: an online copy of the SQLite default while a trainer streams into it."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import httpx

import rlguard
from rlguard_backend.core.app import create_app
from rlguard_backend.core.config import Settings
from rlguard_backend.core.serve import ServerThread
from tests.hook.hookutil import ROOT, ServiceProcess, child_env


def test_backup_while_streaming_is_a_consistent_database(
    service: ServiceProcess, run_id: str, spool_dir: Path, tmp_path: Path
) -> None:
    run = rlguard.init(project="backup", run_id=run_id, url=service.url, spool_dir=str(spool_dir))
    for step in range(100):
        run.log({"loss": float(step)}, step=step)
    assert run.flush(timeout_s=30)
    more = threading.Event()

    def keep_logging() -> None:
        step = 100
        while not more.is_set() and step < 5000:
            run.log({"loss": float(step)}, step=step)
            step += 1
            if step % 50 == 0:
                run.flush(timeout_s=30)

    writer = threading.Thread(target=keep_logging)
    writer.start()
    target = tmp_path / "copy" / "rlguard-backup.db"
    result = subprocess.run(
        [sys.executable, "-m", "rlguard", "db", "backup", str(target)],
        env=child_env(RLGUARD_DATABASE_URL=service.db_url),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    more.set()
    writer.join(timeout=60)
    run.finish(timeout_s=30)
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(target) as copy:
        assert copy.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    app = create_app(Settings(database_url=f"sqlite:///{target}"))
    with ServerThread(app) as copy_server:
        keys = httpx.get(f"{copy_server.url}/api/v1/runs/{run_id}/keys", timeout=30).json()
    app.state.engine.dispose()
    assert keys["data"][0]["count"] >= 100


def test_backup_of_postgres_points_to_its_tools() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rlguard", "db", "backup", "x.db"],
        env=child_env(RLGUARD_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none"),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 2 and "pg_dump" in result.stderr

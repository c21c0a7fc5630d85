"""Scale-out on PostgreSQL without Docker: the compose topology's parts on 127.0.0.1.

Two ``rlguard server`` processes share one PostgreSQL behind nginx run from the same
``deploy/nginx.conf`` that docker-compose.yml mounts; a real hook streams through the proxy
while one backend is SIGKILLed and restarted.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

import rlguard
from tests.conftest import new_run_id
from tests.hook.hookutil import ServiceProcess, child_env
from tests.support.alerts import COLLAPSE, alert_view
from tests.support.nginx import Nginx

TIMEOUT_S = 60.0


def test_scale_out_replicas_starting_together_migrate_once(pg_empty_url: str) -> None:
    command = [sys.executable, "-m", "rlguard", "db", "upgrade", "--database-url", pg_empty_url]
    replicas = [
        subprocess.Popen(command, env=child_env(), stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    results = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in replicas]
    assert [rc for rc, _ in results] == [0] * 4, results
    dsn = pg_empty_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as connection:
        versions = connection.execute("SELECT version_num FROM alembic_version").fetchall()
    assert len(versions) == 1


@pytest.fixture
def topology(pg_url: str, tmp_path: Path) -> Any:
    env = {"RLGUARD_MIGRATE_ON_START": "false"}
    backends = [ServiceProcess(pg_url, env=env).start() for _ in range(2)]
    proxy = Nginx(tmp_path, [b.port for b in backends]).start(TIMEOUT_S)
    yield proxy, backends
    proxy.stop()
    for backend in backends:
        backend.stop()


def _stream(url: str, run_id: str, spool: Path, at: dict[int, Any]) -> Any:
    """Log the collapse scenario through the hook, a batch per 10 steps; ``at[i]()`` at step i."""
    # no system sampler: its host points every 5 s would make the counts depend on how long
    # the stream took (the killed one takes longer), not on what the trainer logged
    run = rlguard.init(
        project="scale",
        run_id=run_id,
        url=url,
        config=COLLAPSE.config,
        spool_dir=str(spool),
        gpu=False,
    )
    for i, (step, values) in enumerate(COLLAPSE.run(seed=5)):
        if i in at:
            at[i]()
        run.log(values, step=step)
        if i % 10 == 9:
            assert run.flush(timeout_s=TIMEOUT_S)
    return run.finish(timeout_s=TIMEOUT_S)


def test_scale_out_backend_killed_behind_the_proxy_loses_and_duplicates_nothing(
    topology: Any, tmp_path: Path
) -> None:
    proxy, (doomed, survivor) = topology
    steps = len(COLLAPSE.run(seed=5))
    killer = threading.Thread(target=doomed.kill)  # races the sender's posts
    killed: list[int | None] = []

    def restart() -> None:
        killer.join()
        killed.append(doomed.proc.returncode if doomed.proc else None)
        doomed.start()

    events = {steps // 3: killer.start, 2 * steps // 3: restart}
    through_proxy = new_run_id("proxied")
    status = _stream(proxy.url, through_proxy, tmp_path / "spool-a", events)
    assert (status.dropped, status.dead_lettered, status.spool_points) == (0, 0, 0)
    assert killed == [-signal.SIGKILL]
    single = new_run_id("single")
    reference = _stream(survivor.url, single, tmp_path / "spool-b", {})
    assert reference.sent == status.sent + status.replayed
    with httpx.Client(base_url=proxy.url, timeout=30) as http:
        keys = http.get(f"/api/v1/runs/{through_proxy}/keys").json()["data"]
        assert keys and {k["count"] for k in keys} == {steps}
        assert alert_view(http, through_proxy) == alert_view(http, single)
        assert any(a[2] == "critical" for a in alert_view(http, single))

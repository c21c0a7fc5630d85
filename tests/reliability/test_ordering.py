"""Time and order as the service defines them (docs/reliability.md, "Order and time"):

- a trainer's wall clock is stored as sent; a skew of an hour either way shifts only the wall
  times (steps order everything, liveness runs on the service's clock) and doctor names it;
- steps logged again by a restarted trainer without a rewind overwrite the stored points (last
  write wins); the live detectors, which saw those steps already, do not see them again, and a
  backtest with ``apply`` re-runs them over what is stored;
- two processes logging one run at once, duplicate batches racing each other and batches
  arriving in any order: every point and sample stored once.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.backend.test_capacity import at_once
from tests.conftest import RunningServer, new_run_id
from tests.hook.hookutil import ServiceProcess, api, child_env, stored_series, wait_for
from tests.hook.test_faults import stored_samples
from tests.reliability.fleet import (
    Trainer,
    expected_samples,
    expected_series,
    stream_in_process,
    undelivered,
)
from tests.support.alerts import COLLAPSE, alert_view, create_run, send_batches, wire_steps

TIMEOUT_S = 60.0
HOUR_S = 3600.0
HEALTHY = "S1_healthy"
POINTS = sum(len(values) for values in expected_series(71).values())  # one trainer's


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """One service for the module's trainer tests (each uses run ids of its own)."""
    # liveness checked every second: a run judged by its trainer's clock would be crashed
    database = tmp_path_factory.mktemp("ordering") / "rlguard.db"
    started = ServiceProcess(database, env={"RLGUARD_HEARTBEAT_TIMEOUT_S": "4"})
    yield started.start()
    started.stop()


def _trainer(service: ServiceProcess, run_id: str, folder: Path, seed: int, **env: str) -> Trainer:
    env = {"RLGUARD_HEARTBEAT_INTERVAL_S": "1", **env}
    return Trainer(service.url, run_id, folder, seed, 0.01, env)


def _stored_times(url: str, run_id: str, key: str) -> list[float]:
    answer = api(
        url, "GET", f"/runs/{run_id}/series?keys={key}&max_points=100000&include_times=true"
    )
    return list(answer["series"][key]["times"])


def test_clock_skew_of_an_hour_either_way_shifts_only_the_wall_times(
    service: ServiceProcess, tmp_path: Path
) -> None:
    skews = {"ahead": HOUR_S, "behind": -HOUR_S}
    started = time.time()
    trainers = {
        name: _trainer(
            service, f"skew-{name}", tmp_path / name, 61, RELIABILITY_CLOCK_SKEW_S=str(s)
        )
        for name, s in skews.items()
    }
    try:
        wait_for(lambda: min(t.progress() for t in trainers.values()) == 300, TIMEOUT_S, "steps")
        for name in skews:
            assert api(service.url, "GET", f"/runs/skew-{name}")["status"] == "running"
        finals = {name: t.finish() for name, t in trainers.items()}
    finally:
        for trainer in trainers.values():
            trainer.kill()
    ended = time.time()
    stream_in_process(service.url, "skew-none", 61, tmp_path / "spool-ref")
    with httpx.Client(base_url=service.url, timeout=30) as http:
        reference = alert_view(http, "skew-none")
        for name, skew in skews.items():
            assert not any(undelivered(finals[name]).values())
            assert stored_series(service.url, f"skew-{name}") == expected_series(61)
            times = _stored_times(service.url, f"skew-{name}", "actor/entropy")
            assert started + skew <= min(times) <= max(times) <= ended + skew
            assert alert_view(http, f"skew-{name}") == reference
    assert any(alert[2] == "critical" for alert in reference)
    doctor = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time; real = time.time; time.time = lambda: real() + 3600;"
            f"from rlguard.cli import main; main(['doctor', '--url', {service.url!r}])",
        ],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert "clock is +3600" in doctor.stdout + doctor.stderr, doctor.stdout + doctor.stderr


def test_steps_logged_again_without_a_rewind_overwrite_and_the_backtest_catches_up(
    service: ServiceProcess, tmp_path: Path
) -> None:
    first = _trainer(service, "again", tmp_path / "first", 41, RELIABILITY_STEPS="0:200")
    assert not any(undelivered(first.finish()).values())
    restarted = _trainer(
        service,
        "again",
        tmp_path / "restarted",
        42,
        RELIABILITY_STEPS="100:",
        RELIABILITY_SCENARIO=HEALTHY,  # from its checkpoint the run went another way
    )
    assert not any(undelivered(restarted.finish()).values())
    stored = expected_series(41, 0, 100)
    for key, values in expected_series(42, 100, None, HEALTHY).items():
        stored.setdefault(key, {}).update(values)
    assert stored_series(service.url, "again") == stored
    assert stored_samples(service.url, "again") == {
        **expected_samples(41, 0, 100),
        **expected_samples(42, 100),
    }
    # what the live detectors saw: the first trainer's steps, then the restart's new ones
    stream_in_process(service.url, "as-fed", 41, tmp_path / "spool-ref", 0, 200)
    stream_in_process(service.url, "as-fed", 42, tmp_path / "spool-ref", 200, None, HEALTHY)
    stream_in_process(service.url, "as-stored", 41, tmp_path / "spool-ref", 0, 100)
    stream_in_process(service.url, "as-stored", 42, tmp_path / "spool-ref", 100, None, HEALTHY)
    with httpx.Client(base_url=f"{service.url}", timeout=30) as http:
        assert alert_view(http, "again") == alert_view(http, "as-fed")
        replay = http.post("/api/v1/runs/again/detect", json={"apply": True})
        assert replay.status_code == 200, replay.text
        assert alert_view(http, "again") == alert_view(http, "as-stored")
        assert alert_view(http, "as-fed") != alert_view(http, "as-stored")


def test_two_processes_logging_one_run_at_once_store_each_point_once(
    service: ServiceProcess, tmp_path: Path
) -> None:
    # rank_zero_only=False by mistake: two processes log the same run, the same data
    twins = [_trainer(service, "twins", tmp_path / f"twin{i}", 71) for i in (0, 1)]
    try:
        wait_for(
            lambda: all(t.status().get("sent", 0) == POINTS for t in twins), TIMEOUT_S, "delivery"
        )
        finals = [t.finish() for t in twins]
    finally:
        for twin in twins:
            twin.kill()
    assert all(not any(undelivered(f).values()) for f in finals)
    assert stored_series(service.url, "twins") == expected_series(71)
    assert stored_samples(service.url, "twins") == expected_samples(71)
    stream_in_process(service.url, "single", 71, tmp_path / "spool-ref")
    with httpx.Client(base_url=service.url, timeout=30) as http:
        assert alert_view(http, "twins") == alert_view(http, "single")


def test_duplicate_batches_racing_in_shuffled_order_store_each_point_once(
    db_server: RunningServer,
) -> None:
    steps = wire_steps(COLLAPSE.run(seed=51))
    batches = [(f"b{i}", steps[i : i + 10]) for i in range(0, len(steps), 10)]
    random.Random(51).shuffle(batches)
    shuffled, in_order = new_run_id("shuffled"), new_run_id("in-order")
    with httpx.Client(base_url=db_server.url, timeout=TIMEOUT_S) as http:
        for run_id in (shuffled, in_order):
            create_run(http, run_id, COLLAPSE.config)
        send_batches(http, in_order, steps, 10)
        for batch_id, part in batches:  # each batch twice at once, from two clients
            body = {"batch_id": batch_id, "steps": part}

            def post(_: int, body: dict = body) -> httpx.Response:
                url = f"{db_server.url}/api/v1/runs/{shuffled}/batches"
                return httpx.post(url, json=body, timeout=TIMEOUT_S)

            answers = at_once(2, post)
            assert [a.status_code for a in answers] == [200, 200]
            assert sorted(a.json()["duplicate"] for a in answers) == [False, True]
        for run_id in (shuffled, in_order):
            assert http.patch(f"/api/v1/runs/{run_id}", json={"status": "finished"}).is_success
        assert stored_series(db_server.url, shuffled) == stored_series(db_server.url, in_order)
        keys = http.get(f"/api/v1/runs/{shuffled}/keys").json()["data"]
        assert {k["count"] for k in keys} == {len(steps)}
        replay = http.post(f"/api/v1/runs/{shuffled}/detect", json={"apply": True})
        assert replay.status_code == 200, replay.text
        assert alert_view(http, shuffled) == alert_view(http, in_order)
        assert any(alert[2] == "critical" for alert in alert_view(http, in_order))

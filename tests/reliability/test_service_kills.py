"""The service SIGKILLed ten times at seeded random moments while three trainer processes
stream into it (SQLite, one ``rlguard server`` restarted on the same port each time): every
point and sample ends stored exactly once, and the alerts are those of an undisturbed run."""

from __future__ import annotations

import random
from pathlib import Path

import httpx

from tests.hook.hookutil import ServiceProcess, stored_series, wait_for
from tests.hook.test_faults import stored_samples
from tests.reliability.fleet import (
    Trainer,
    expected_samples,
    expected_series,
    stream_in_process,
    undelivered,
)
from tests.reliability.trainer import steps
from tests.support.alerts import alert_view

KILLS = 10
SEEDS = (11, 12, 13)  # one trainer each
STEP_SLEEP_S = 0.08
PROGRESS_TIMEOUT_S = 120.0


def test_service_sigkilled_ten_times_under_three_trainers_stores_each_point_once(
    tmp_path: Path,
) -> None:
    rng = random.Random(19)
    service = ServiceProcess(tmp_path / "rlguard.db").start()
    trainers = [
        Trainer(service.url, f"killed-{seed}", tmp_path / f"t{seed}", seed, STEP_SLEEP_S)
        for seed in SEEDS
    ]
    total = len(steps(SEEDS[0]))
    # one kill in each eleventh of the trainers' progress, at a random point within it
    moments = [int(total * (k + rng.random()) / (KILLS + 1)) for k in range(KILLS)]
    try:
        for k, moment in enumerate(moments):
            wait_for(
                lambda m=moment: min(t.progress() for t in trainers) >= m,
                PROGRESS_TIMEOUT_S,
                f"the trainers to log {moment} steps before kill {k}",
            )
            assert all(t.alive() for t in trainers), f"a trainer ended before kill {k}"
            service.kill()
            service.start()
        statuses = [t.finish() for t in trainers]
        assert sum(s["spooled"] for s in statuses) > 0  # the kills were felt
        assert all(not any(undelivered(s).values()) for s in statuses), statuses
        for seed, trainer in zip(SEEDS, trainers, strict=True):
            assert stored_series(service.url, trainer.run_id) == expected_series(seed)
            assert stored_samples(service.url, trainer.run_id) == expected_samples(seed)
        for seed in SEEDS:
            stream_in_process(
                service.url, f"undisturbed-{seed}", seed, tmp_path / "spool-reference"
            )
        with httpx.Client(base_url=service.url, timeout=30) as http:
            for seed in SEEDS:
                reference = alert_view(http, f"undisturbed-{seed}")
                assert any(alert[2] == "critical" for alert in reference)
                assert alert_view(http, f"killed-{seed}") == reference
    finally:
        for trainer in trainers:
            trainer.kill()
        service.stop()

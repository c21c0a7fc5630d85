"""Points as the hook packs them, through a real service: exact floats, changing keys, merged
steps, resumed spools of packed batches, and JSON for a service that does not read them."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import pytest

import rlguard
from rlguard import _packed
from tests.hook.hookutil import FaultProxy, ServiceProcess, free_port, stored_series

FAST = {"gpu": False, "flush_interval_s": 0.05, "backoff_base_s": 0.05, "backoff_cap_s": 0.2}


def logged_steps(count: int) -> list[dict[str, object]]:
    """Full-precision floats, a key that comes and goes, and now and then a numpy scalar."""
    rng = random.Random(7)
    steps: list[dict[str, object]] = []
    for step in range(count):
        values: dict[str, object] = {f"k{i}": rng.random() for i in range(20)}
        if step % 5 == 0:
            values["every5"] = rng.uniform(-1e300, 1e300)
        if step % 9 == 0:
            values["k3"] = np.float32(0.125)
        steps.append(values)
    return steps


def as_stored(steps: list[dict[str, object]]) -> dict[str, dict[int, float]]:
    stored: dict[str, dict[int, float]] = {}
    for step, values in enumerate(steps):
        for key, value in values.items():
            stored.setdefault(key, {})[step] = float(value)  # type: ignore[arg-type]
    return stored


def test_points_reach_the_service_bit_exact_in_packed_batches(
    service: ServiceProcess, run_id: str, spool_dir: Path
) -> None:
    steps = logged_steps(300)
    with rlguard.init(
        project="packed", run_id=run_id, url=service.url, spool_dir=str(spool_dir), **FAST
    ) as run:
        for step, values in enumerate(steps):
            run.log(values, step=step)
        run.log({"late": 1.0}, step=299)  # merged into step 299
    status = run.status()
    expected = as_stored(steps)
    expected["late"] = {299: 1.0}
    assert stored_series(service.url, run_id) == expected
    points = sum(len(v) for v in steps) + 1
    assert (status.logged, status.sent, status.skipped, status.dropped) == (points, points, 0, 0)


def test_a_service_reading_only_json_gets_json_after_one_refusal(
    proxy: FaultProxy,
    service: ServiceProcess,
    run_id: str,
    spool_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="rlguard")
    proxy.mode = "json-only"
    steps = logged_steps(40)
    run = rlguard.init(
        project="packed", run_id=run_id, url=proxy.url, spool_dir=str(spool_dir), **FAST
    )
    for step, values in enumerate(steps):
        run.log(values, step=step)
        if step % 10 == 9:
            assert run.flush(timeout_s=10)
    status = run.finish()
    assert stored_series(service.url, run_id) == as_stored(steps)
    assert (status.sent, status.dead_lettered) == (sum(len(v) for v in steps), 0)
    assert proxy.batch_posts().count(400) == 1  # the packed body, once; JSON afterwards
    refusals = [r for r in caplog.records if "does not read packed batches" in r.getMessage()]
    assert len(refusals) == 1


def test_a_resumed_process_replays_only_the_packed_steps_before_its_resume_step(
    service: ServiceProcess, run_id: str, spool_dir: Path
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    first = rlguard.init(project="packed", run_id=run_id, url=down, spool_dir=str(spool_dir))
    for step in range(10):
        first.log({"a": step + 0.5, "b": -step - 0.25}, step=step)
    assert first.finish(timeout_s=0).spool_points == 20
    spooled = sorted((spool_dir / run_id).glob("*.batch"))
    assert spooled and all(_packed.is_packed(path.read_bytes()) for path in spooled)
    second = rlguard.init(
        project="packed",
        run_id=run_id,
        url=service.url,
        spool_dir=str(spool_dir),
        resume_from_step=4,
        **FAST,
    )
    second.log({"a": 100.0}, step=5)
    status = second.finish()
    # step 5 may queue behind the replayed batch
    assert (status.replayed + status.sent, status.spool_points) == (10 + 1, 0)
    assert stored_series(service.url, run_id) == {
        "a": {**{s: s + 0.5 for s in range(5)}, 5: 100.0},
        "b": {s: -s - 0.25 for s in range(5)},
    }

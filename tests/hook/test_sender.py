"""The hook against a real service: delivery, spool, backoff, dead letters, alerts, bounds."""

from __future__ import annotations

import logging
import math
import statistics
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch

import rlguard
from rlguard._config import load_config
from rlguard._sender import backoff_s
from tests.hook.hookutil import (
    FaultProxy,
    ServiceProcess,
    api,
    child_env,
    free_port,
    stored_series,
    wait_for,
)

FAST = {"gpu": False, "flush_interval_s": 0.05, "backoff_base_s": 0.05, "backoff_cap_s": 0.2}


def values_at(step: int) -> dict[str, float]:
    return {"loss": step * 0.5, "kl": math.sin(step), "nan": math.nan if step % 7 == 0 else 1.0}


def expected_series(steps: range) -> dict[str, dict[int, object]]:
    wire = {"loss": {}, "kl": {}, "nan": {}}  # type: dict[str, dict[int, object]]
    for step in steps:
        for key, value in values_at(step).items():
            wire[key][step] = "NaN" if math.isnan(value) else value
    return wire


def test_run_log_delivers_every_value_kind(service: ServiceProcess, run_id: str, spool_dir: Path):
    run = rlguard.init(
        project="hook", run_id=run_id, url=service.url, spool_dir=str(spool_dir), **FAST
    )
    run.log(
        {
            "f": 0.5,
            "i": 3,
            "b": True,
            "nan": math.nan,
            "inf": math.inf,
            "ninf": -math.inf,
            "np": np.float32(0.25),
            "t": torch.tensor(1.5),
            "bf": torch.tensor(2.0).bfloat16(),
        },
        step=4,
    )
    run.log({"f": 0.75})  # step defaults to the previous one + 1
    status = run.finish()
    assert stored_series(service.url, run_id) == {
        "f": {4: 0.5, 5: 0.75},
        "i": {4: 3.0},
        "b": {4: 1.0},
        "nan": {4: "NaN"},
        "inf": {4: "Infinity"},
        "ninf": {4: "-Infinity"},
        "np": {4: 0.25},
        "t": {4: 1.5},
        "bf": {4: 2.0},
    }
    assert (status.logged, status.sent, status.spooled, status.dropped) == (10, 10, 0, 0)
    assert api(service.url, "GET", f"/runs/{run_id}")["status"] == "finished"


def test_run_log_skips_non_numeric_with_one_warning_per_key(
    service: ServiceProcess, run_id: str, spool_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rlguard")
    with rlguard.init(
        project="hook", run_id=run_id, url=service.url, spool_dir=str(spool_dir), **FAST
    ) as run:
        for step in range(5):
            run.log({"ok": 1.0, "text": "abc", "list": [1, 2]}, step=step)
    warnings = [r.getMessage() for r in caplog.records if "is not a number" in r.getMessage()]
    assert len(warnings) == 2
    assert run.status().skipped == 10
    assert list(stored_series(service.url, run_id)) == ["ok"]


def test_run_spools_on_5xx_and_replays_oldest_first(
    proxy: FaultProxy, service: ServiceProcess, run_id: str, spool_dir: Path
) -> None:
    proxy.mode = "status:503"
    run = rlguard.init(
        project="hook", run_id=run_id, url=proxy.url, spool_dir=str(spool_dir), **FAST
    )
    for step in range(50):
        run.log(values_at(step), step=step)
        if step % 10 == 9:
            assert run.flush(timeout_s=10)
    spooled = sorted((spool_dir / run_id).glob("*.batch"))
    assert len(spooled) >= 5 and run.status().spool_points == 150
    proxy.mode = "pass"
    status = run.finish(timeout_s=30)
    assert (status.spooled, status.replayed, status.spool_batches) == (150, 150, 0)
    assert stored_series(service.url, run_id) == expected_series(range(50))
    assert not list((spool_dir / run_id).glob("*.batch"))


def test_run_backoff_is_capped_exponential_with_jitter(
    proxy: FaultProxy, run_id: str, spool_dir: Path
) -> None:
    proxy.mode = "status:503"
    settings = {**FAST, "flush_interval_s": 0.01, "backoff_base_s": 0.02, "backoff_cap_s": 0.32}
    run = rlguard.init(
        project="hook", run_id=run_id, url=proxy.url, spool_dir=str(spool_dir), **settings
    )
    run.log({"a": 1.0}, step=0)
    wait_for(lambda: len(proxy.times) >= 9, 20, "nine attempts")
    run.finish(timeout_s=0)
    gaps = [b - a for a, b in zip(proxy.times, proxy.times[1:8], strict=False)]
    # gap n is min(0.02·2^n, 0.32) × U(0.5, 1), plus whatever the machine's load adds: never
    # shorter (how long it may grow is a wall-clock matter, checked on backoff_s below)
    for n, gap in enumerate(gaps):
        assert gap >= 0.5 * min(0.02 * 2**n, 0.32) - 0.005, (n, gaps)
    assert min(gaps[5:]) >= 0.16 - 0.005  # past 0.02·2^4 every wait is at least half the cap
    assert len({round(g / min(0.02 * 2**n, 0.32), 2) for n, g in enumerate(gaps)}) > 1  # jitter


@pytest.mark.parametrize("draw", [0.0, 0.5, 0.999])
def test_backoff_doubles_from_the_base_up_to_the_cap_and_honours_retry_after(draw: float) -> None:
    cfg = load_config(environ={}, backoff_base_s=0.02, backoff_cap_s=0.32)
    delays = [backoff_s(n, cfg, None, lambda: draw) for n in range(1, 10)]
    jitter = 0.5 + draw / 2
    assert delays == [min(0.02 * 2 ** (n - 1), 0.32) * jitter for n in range(1, 10)]
    assert max(delays) <= 0.32 and delays[-1] == 0.32 * jitter
    # a Retry-After of 5 s outlasts the backoff: at least 5 s, spread by up to half
    assert backoff_s(1, cfg, 5.0, lambda: draw) == 5.0 * (1 + draw / 2)


def test_run_rejected_batch_goes_to_dead_letter_with_a_warning(
    proxy: FaultProxy, run_id: str, spool_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rlguard")
    run = rlguard.init(
        project="hook", run_id=run_id, url=proxy.url, spool_dir=str(spool_dir), **FAST
    )
    run.log({"a": 1.0}, step=0)
    assert run.flush(10)
    proxy.mode = "status:422"
    run.log({"a": 2.0, "b": 3.0}, step=1)
    assert run.flush(10)
    proxy.mode = "pass"
    status = run.finish()
    assert (status.sent, status.dead_lettered, status.spool_batches) == (1, 2, 0)
    letters = (spool_dir / run_id / "dead-letter.jsonl").read_text().splitlines()
    assert len(letters) == 1 and "422" in letters[0]
    assert any("rejected a batch" in r.getMessage() for r in caplog.records)


def test_run_never_raises_and_spools_when_service_unreachable(
    run_id: str, spool_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rlguard")
    url = f"http://127.0.0.1:{free_port()}"
    run = rlguard.init(project="hook", run_id=run_id, url=url, spool_dir=str(spool_dir), **FAST)
    for step in range(20):
        run.log(values_at(step), step=step)
    started = time.monotonic()
    status = run.finish(timeout_s=0.5)
    assert time.monotonic() - started < 3.0
    assert (status.logged, status.spool_points, status.sent) == (60, 60, 0)
    assert status.last_error and "Connection refused" in status.last_error
    assert (spool_dir / run_id / "final.json").exists()
    assert any("still in" in r.getMessage() for r in caplog.records)


def test_later_process_of_the_run_replays_what_an_earlier_left(
    service: ServiceProcess, run_id: str, spool_dir: Path
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    first = rlguard.init(project="hook", run_id=run_id, url=down, spool_dir=str(spool_dir), **FAST)
    for step in range(30):
        first.log(values_at(step), step=step)
    assert first.finish(timeout_s=0).spool_points == 90
    second = rlguard.init(
        project="hook", run_id=run_id, url=service.url, spool_dir=str(spool_dir), **FAST
    )
    for step in range(30, 40):
        second.log(values_at(step), step=step)
    status = second.finish()
    assert (status.replayed, status.sent) == (90, 0) or status.replayed + status.sent == 120
    assert stored_series(service.url, run_id) == expected_series(range(40))


def test_finish_is_bounded_when_the_service_hangs(
    proxy: FaultProxy, run_id: str, spool_dir: Path
) -> None:
    run = rlguard.init(
        project="hook",
        run_id=run_id,
        url=proxy.url,
        spool_dir=str(spool_dir),
        request_timeout_s=0.5,
        **FAST,
    )
    run.log({"a": 1.0}, step=0)
    assert run.flush(10)
    proxy.mode = "slow:5"
    run.log({"a": 2.0}, step=1)
    started = time.monotonic()
    status = run.finish(timeout_s=1.0)
    assert time.monotonic() - started < 3.5
    assert status.spool_points == 1  # the timed-out batch waits on disk


def test_log_stays_fast_while_the_service_is_down(run_id: str, spool_dir: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    run = rlguard.init(project="hook", run_id=run_id, url=url, spool_dir=str(spool_dir), **FAST)
    metrics = {f"k{i}": float(i) for i in range(20)}
    costs = []
    for step in range(5000):
        started = time.perf_counter_ns()
        run.log(metrics, step=step)
        costs.append(time.perf_counter_ns() - started)
    run.finish(timeout_s=0)
    # an HTTP request or an fsync costs ~100 µs or more; a queue append well under 10 µs
    assert statistics.median(costs) < 10_000
    assert sorted(costs)[int(0.99 * len(costs))] < 200_000


def test_memory_stays_bounded_during_a_long_outage(run_id: str, spool_dir: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    run = rlguard.init(
        project="hook",
        run_id=run_id,
        url=url,
        spool_dir=str(spool_dir),
        **FAST,
    )
    tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    for step in range(10_000):
        run.log({f"k{i}": step + i / 100 for i in range(20)}, step=step)
        if step % 1000 == 999:
            assert run.flush(30)
    growth = tracemalloc.get_traced_memory()[0] - baseline
    tracemalloc.stop()
    status = run.finish(timeout_s=0)
    assert status.spool_points == 200_000 and status.queued_steps == 0
    assert growth < 3_000_000  # the 200 k points held in RAM would take ~12 MB


def test_run_alerts_from_acks_reach_run_alerts_and_on_alert(
    proxy: FaultProxy, run_id: str, spool_dir: Path
) -> None:
    seen: list[dict] = []
    alert = {
        "id": 1,
        "run_id": run_id,
        "detector": "nonfinite",
        "severity": "critical",
        "message": "NaN in actor/entropy",
    }
    proxy.inject_alert = alert
    run = rlguard.init(
        project="hook",
        run_id=run_id,
        url=proxy.url,
        spool_dir=str(spool_dir),
        on_alert=seen.append,
        **FAST,
    )
    run.log({"actor/entropy": math.nan}, step=0)
    run.finish()
    assert run.alerts == [alert] and seen == [alert]


def test_run_on_alert_callback_error_does_not_stop_delivery(
    proxy: FaultProxy, run_id: str, spool_dir: Path
) -> None:
    proxy.inject_alert = {"id": 2, "detector": "x"}

    def broken(alert: dict) -> None:
        raise RuntimeError("callback bug")

    run = rlguard.init(
        project="hook",
        run_id=run_id,
        url=proxy.url,
        spool_dir=str(spool_dir),
        on_alert=broken,
        **FAST,
    )
    for step in range(3):
        run.log({"a": 1.0}, step=step)
        assert run.flush(10)
    assert run.finish().sent == 3


def test_run_token_is_sent_as_bearer(proxy: FaultProxy, run_id: str, spool_dir: Path) -> None:
    seen: list[str] = []
    original = proxy._answer

    def record(method, path, headers, body):  # type: ignore[no-untyped-def]
        seen.append(headers.get("Authorization", ""))
        return original(method, path, headers, body)

    proxy._answer = record  # type: ignore[method-assign]
    with rlguard.init(
        project="hook",
        run_id=run_id,
        url=proxy.url,
        spool_dir=str(spool_dir),
        token="s3cret",
        **FAST,
    ) as run:
        run.log({"a": 1.0}, step=0)
    assert seen and set(seen) == {"Bearer s3cret"}


SCRIPT = """
import sys, rlguard
run = rlguard.init(project="hook", run_id=sys.argv[1], url=sys.argv[2], spool_dir=sys.argv[3],
                   gpu=False, flush_interval_s=0.05)
for step in range(10):
    run.log({{"a": float(step)}}, step=step)
{ending}
"""


@pytest.mark.parametrize(
    ("ending", "status"),
    [("raise RuntimeError('boom')", "failed"), ("pass  # atexit finishes the run", "finished")],
)
def test_process_exit_finishes_the_run(
    service: ServiceProcess, run_id: str, spool_dir: Path, ending: str, status: str
) -> None:
    code = textwrap.dedent(SCRIPT.format(ending=ending))
    done = subprocess.run(
        [sys.executable, "-c", code, run_id, service.url, str(spool_dir)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ("boom" in done.stderr) == (status == "failed")
    run = api(service.url, "GET", f"/runs/{run_id}")
    assert run["status"] == status
    if status == "failed":
        assert "RuntimeError: boom" in run["summary"]["error"]
    assert stored_series(service.url, run_id) == {"a": {s: float(s) for s in range(10)}}

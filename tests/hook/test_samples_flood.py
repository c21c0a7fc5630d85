"""A trainer logging ten times the sample budget into a live service: the service's memory
stays bounded (its peak RSS, read from /proc) and not one metric point is lost."""

from __future__ import annotations

from pathlib import Path

import rlguard
from tests.hook.hookutil import ServiceProcess, stored_series

BUDGET = 64  # samples kept per step by the hook (max_samples_per_step)
STEPS, KEYS, TEXT_BYTES = 120, 20, 2000
# The service's peak RSS may grow by at most this much over what it holds once started and
# having taken one step of samples (imports, pools, caches warm): 15 batches of 512 samples of
# 2 kB (~1 MB of JSON each) pass through it here. Measured: 92 MB warm, peak 98 MB.
GROWTH_BOUND_MB = 64


def _status_kb(pid: int, field: str) -> int:
    """A ``Vm*`` line of /proc/<pid>/status, in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _rollouts(step: int, count: int) -> list[dict[str, object]]:
    return [
        {
            "prompt": f"step {step} prompt {i}: " + "p" * 180,
            "response": f"answer {i} " + "r" * (TEXT_BYTES - 200),
            "reward": float(i % 11),
            "kl": 0.001 * i,
        }
        for i in range(count)
    ]


def test_sample_flood_keeps_the_service_rss_bounded_and_every_metric_point(
    tmp_path: Path, run_id: str
) -> None:
    service = ServiceProcess(tmp_path / "flood.db").start()
    try:
        assert service.proc is not None
        pid = service.proc.pid
        run = rlguard.init(
            project="flood",
            run_id=run_id,
            url=service.url,
            spool_dir=str(tmp_path / "spool"),
            gpu=False,
            max_samples_per_step=BUDGET,
        )
        batches = [_rollouts(step, 10 * BUDGET) for step in range(4)]  # built once: 1.3 MB each
        metrics = [{f"k{i}": step + i / 100 for i in range(KEYS)} for step in range(STEPS)]
        run.log(metrics[0], step=0, samples=batches[0])
        assert run.flush(60)
        warm_kb = _status_kb(pid, "VmRSS")
        for step in range(1, STEPS):
            run.log(metrics[step], step=step, samples=batches[step % 4])
        status = run.finish(timeout_s=120)
        peak_kb = _status_kb(pid, "VmHWM")  # the kernel's high-water mark of the RSS
        stored = stored_series(service.url, run_id)
    finally:
        service.stop()
    assert {key: len(stored[key]) for key in metrics[0]} == dict.fromkeys(metrics[0], STEPS)
    assert all(stored[f"k{i}"][s] == s + i / 100 for i in range(KEYS) for s in range(STEPS))
    assert (status.dropped_steps, status.dropped, status.dead_lettered) == (0, 0, 0)
    # ten times the budget was logged: the hook kept BUDGET a step, or dropped (counted)
    kept = status.samples_sent + status.samples_replayed
    assert kept + status.samples_dropped <= STEPS * BUDGET
    assert status.samples_filtered + status.samples_dropped >= STEPS * 9 * BUDGET
    assert (peak_kb - warm_kb) / 1024 < GROWTH_BOUND_MB, (warm_kb, peak_kb)

"""The spool at its limit: its byte budget reached, or its disk full (a 32 KiB tmpfs mounted
in the trainer's own mount namespace). The trainer keeps training, the hook warns once, the
oldest spooled samples and then the oldest points are dropped to make room (the documented
policy), the drops are counted in ``run.status()`` and told to the service once it is back."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.hook.hookutil import ServiceProcess, api, free_port, stored_series, wait_for
from tests.hook.test_faults import stored_samples
from tests.reliability.fleet import Trainer, expected_samples, expected_series
from tests.reliability.trainer import steps

SEED = 31
TIMEOUT_S = 60.0
BUDGET_BYTES = 24 * 1024
DISK_BYTES = 32 * 1024
WARNINGS = {"budget": "reached its budget", "disk": "cannot grow"}


def _tmpfs_prefix(mountpoint: Path) -> list[str]:
    """Run the command in a mount namespace of its own with a small tmpfs at ``mountpoint``
    (as root; otherwise in a user namespace, where tmpfs may be mounted unprivileged)."""
    mountpoint.mkdir(parents=True)
    unshare = shutil.which("unshare") or "/usr/bin/unshare"
    flags = ["--mount"] if os.geteuid() == 0 else ["--map-root-user", "--mount"]
    script = f'mount -t tmpfs -o size={DISK_BYTES} rlguard-spool "$0" && exec "$@"'
    prefix = [unshare, *flags, "sh", "-c", script, str(mountpoint)]
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:  # a container without CAP_SYS_ADMIN or user namespaces
        pytest.skip(f"cannot mount a private tmpfs here: {probe.stderr.strip()}")
    return prefix


def _suffix(stored_steps: set[int], all_steps: list[int]) -> int:
    """The first stored step, after checking that every later step is stored too."""
    first = min(stored_steps)
    assert stored_steps == {s for s in all_steps if s >= first}, "a step inside was dropped"
    return first


@pytest.mark.parametrize("limit", ["budget", "disk"])
def test_spool_limit_drops_oldest_samples_then_points_and_tells_the_service(
    limit: str, tmp_path: Path
) -> None:
    port = free_port()
    folder = tmp_path / "trainer"
    if limit == "budget":
        env, prefix = {"RLGUARD_SPOOL_BUDGET_MB": str(BUDGET_BYTES / 2**20)}, None
    else:
        env, prefix = {}, _tmpfs_prefix(folder / "spool")
    trainer = Trainer(f"http://127.0.0.1:{port}", "spool-limit", folder, SEED, 0.003, env, prefix)
    service = ServiceProcess(tmp_path / "rlguard.db", port)
    logged = steps(SEED)
    try:
        wait_for(lambda: trainer.progress() == len(logged), TIMEOUT_S, "every step logged")
        during = trainer.status()
        assert during["dropped"] > 0 and during["samples_dropped"] > 0, during
        # the trainer's own view of its spool (the tmpfs is mounted in its namespace only)
        seen = Path(f"/proc/{trainer.proc.pid}/root") / trainer.spool.relative_to("/")
        spooled = sum(f.stat().st_size for f in seen.glob("*/*.batch"))
        assert 0 < spooled <= (BUDGET_BYTES if limit == "budget" else DISK_BYTES)
        service.start()
        wait_for(lambda: trainer.status()["spool_batches"] == 0, TIMEOUT_S, "the spool replayed")
        final = trainer.finish()
    finally:
        trainer.kill()
    try:
        warned = [line for line in trainer.stderr.splitlines() if WARNINGS[limit] in line]
        assert len(warned) == 1, trainer.stderr[-3000:]
        # training went on; each step also carries the share the hook read from its samples
        assert final["logged"] - final["sample_signal_points"] == sum(len(v) for _, v in logged)
        assert final["sample_signal_points"] == len(logged)
        run = api(service.url, "GET", "/runs/spool-limit")
        assert run["dropped"] == {
            "points": final["dropped"],
            "steps": 0,
            "samples": final["samples_dropped"],
        }
        series, expected = stored_series(service.url, "spool-limit"), expected_series(SEED)
        all_steps = [step for step, _ in logged]
        first_point = _suffix(set(series["actor/entropy"]), all_steps)
        assert series == {
            k: {s: v for s, v in e.items() if s >= first_point} for k, e in expected.items()
        }
        assert final["dropped"] == sum(len(v) + 1 for s, v in logged if s < first_point)
        samples = stored_samples(service.url, "spool-limit")
        first_sample = _suffix(set(samples), all_steps)
        assert first_sample >= first_point  # the samples went first
        assert samples == {s: r for s, r in expected_samples(SEED).items() if s >= first_sample}
        assert final["samples_dropped"] == 2 * sum(1 for s in all_steps if s < first_sample)
    finally:
        service.stop()

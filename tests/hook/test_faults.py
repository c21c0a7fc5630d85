"""Fault injection on real processes: the database ends with every logged point and sample once."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.hook.hookutil import (
    ROOT,
    ServiceProcess,
    api,
    child_env,
    free_port,
    stored_series,
    wait_for,
)
from tests.hook.trainer_script import samples_at, values_at

SCRIPT = ROOT / "tests" / "hook" / "trainer_script.py"


def start_trainer(url: str, run_id: str, tmp: Path, steps: int, sleep_s: float):
    cmd = [
        sys.executable,
        str(SCRIPT),
        url,
        run_id,
        str(tmp / "spool"),
        str(steps),
        str(sleep_s),
        str(tmp / "checkpoint"),
    ]
    return subprocess.Popen(
        cmd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def expected(steps: int) -> dict[str, dict[int, object]]:
    out: dict[str, dict[int, object]] = {}
    for step in range(steps):
        for key, value in values_at(step).items():
            out.setdefault(key, {})[step] = "NaN" if value != value else value
    # what the hook reads from each step's samples: none of them is empty or malformed
    out["samples/degenerate_fraction"] = dict.fromkeys(range(steps), 0.0)
    return out


def stored_samples(url: str, run_id: str) -> dict[int, list[str]]:
    """Every stored sample's response, by step, read page by page."""
    out: dict[int, list[str]] = {}
    offset = 0
    while True:
        page = api(url, "GET", f"/runs/{run_id}/samples?limit=1000&offset={offset}")
        for sample in page["data"]:
            out.setdefault(sample["step"], []).append(sample["response"])
        offset += len(page["data"])
        if offset >= page["count"]:
            return out


def expected_samples(steps: int) -> dict[int, list[str]]:
    return {step: [str(s["response"]) for s in samples_at(step)] for step in range(steps)}


def finished(trainer: subprocess.Popen, timeout_s: float = 120) -> None:
    out, err = trainer.communicate(timeout=timeout_s)
    assert trainer.returncode == 0, (out, err[-3000:])


def spooled(tmp: Path, run_id: str) -> bool:
    return any((tmp / "spool" / run_id).glob("*.batch"))


def last_stored_step(url: str, run_id: str) -> int:
    try:
        return api(url, "GET", f"/runs/{run_id}").get("last_step") or -1
    except OSError:
        return -1


def test_faults_service_down_from_the_start_then_started(tmp_path: Path) -> None:
    port = free_port()
    trainer = start_trainer(f"http://127.0.0.1:{port}", "down-first", tmp_path, 150, 0.01)
    service = ServiceProcess(tmp_path / "rlguard.db", port)
    try:
        wait_for(lambda: spooled(tmp_path, "down-first"), 60, "the trainer to spool")
        service.start()
        finished(trainer)
        assert stored_series(service.url, "down-first") == expected(150)
        assert stored_samples(service.url, "down-first") == expected_samples(150)
        assert api(service.url, "GET", "/runs/down-first")["status"] == "finished"
    finally:
        trainer.kill()
        service.stop()


def test_faults_service_sigkilled_three_times_mid_run(tmp_path: Path) -> None:
    service = ServiceProcess(tmp_path / "rlguard.db").start()
    trainer = start_trainer(service.url, "service-killed", tmp_path, 600, 0.01)
    try:
        for round_ in range(3):
            reached = last_stored_step(service.url, "service-killed")
            wait_for(
                lambda r=reached: last_stored_step(service.url, "service-killed") > r + 20,
                60,
                f"progress before kill {round_}",
            )
            service.kill()
            wait_for(
                lambda: spooled(tmp_path, "service-killed") or trainer.poll() is not None,
                60,
                "the trainer to notice the outage",
            )
            service.start()
        finished(trainer)
        assert stored_series(service.url, "service-killed") == expected(600)
        assert stored_samples(service.url, "service-killed") == expected_samples(600)
    finally:
        trainer.kill()
        service.stop()


def test_faults_trainer_sigkilled_and_restarted_with_the_same_run_id(tmp_path: Path) -> None:
    service = ServiceProcess(tmp_path / "rlguard.db").start()
    checkpoint = tmp_path / "checkpoint"
    try:
        trainer = start_trainer(service.url, "trainer-killed", tmp_path, 400, 0.01)
        wait_for(
            lambda: checkpoint.exists() and int(checkpoint.read_text() or 0) >= 99,
            60,
            "a checkpoint at step 99 or later",
        )
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(timeout=30)
        resumed_from = int(checkpoint.read_text())
        assert last_stored_step(service.url, "trainer-killed") >= resumed_from
        restarted = start_trainer(service.url, "trainer-killed", tmp_path, 400, 0.001)
        finished(restarted)
        assert stored_series(service.url, "trainer-killed") == expected(400)
        assert stored_samples(service.url, "trainer-killed") == expected_samples(400)
        assert api(service.url, "GET", "/runs/trainer-killed")["resume_from_step"] == resumed_from
    finally:
        service.stop()

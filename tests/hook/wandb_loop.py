"""Training loops that log to W&B only, with no rlguard code: the W&B tests run them as
processes, with and without ``rlguard watch``.

    python wandb_loop.py semantics RUN_ID      every step rule of W&B's history, once each
    python wandb_loop.py collapse RUN_ID URL   entropy collapsing; waits for rlguard's alert
    python wandb_loop.py steps RUN_ID FIRST N  N implicit steps, resuming RUN_ID at FIRST
    python wandb_loop.py wait-signal           prints "ready", exits 42 on SIGTERM
"""

from __future__ import annotations

import json
import random
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
COLLAPSE_STEPS = 60  # the scenario's critical alert fires by step 40
ALERT_TIMEOUT_S = 120.0
SEMANTICS_PROJECT = "semantics"


def log_step_semantics(wandb: Any, run_id: str) -> None:
    """One W&B run that uses each history step rule; ``EXPECTED_SERIES`` is what it commits."""
    run = wandb.init(
        project=SEMANTICS_PROJECT,
        id=run_id,
        name="semantics",
        config={"lr": 1e-6, "model": {"layers": 2}},
        tags=["tee"],
    )
    run.define_metric("env_step")
    run.define_metric("eval/*", step_metric="env_step")
    wandb.log({"loss": 1.0, "acc": 0.1})  # step 0: no step, no commit: committed
    wandb.log({"loss": 0.9})  # step 1
    wandb.log({"part": 1.0}, commit=False)  # accumulated ...
    wandb.log({"other": 2.0}, commit=False)
    wandb.log({"loss": 0.8})  # ... into step 2
    wandb.log({"loss": 0.7}, step=5)  # step 5, pending
    wandb.log({"acc": 0.5}, step=5)  # the same row
    wandb.log({"loss": 0.6}, step=4)  # below the current step: W&B drops it
    run.log({"loss": 0.5})  # commits step 5 (loss 0.5 replaces 0.7)
    wandb.log({"eval/reward": 0.3, "env_step": 100})  # step 6; eval/reward along env_step
    wandb.log({"env_step": 200})  # step 7
    wandb.log({"eval/reward": 0.4})  # step 8: at env_step's last value, 200
    histogram = wandb.Histogram([1.0, 2.0, 2.0, 3.0])
    wandb.log({"reward": 0.2, "hist": histogram, "nested": {"a": 1.0}, "text": "hi"})  # step 9
    wandb.log({"late": 1.0}, step=12)  # pending until the run finishes
    run.summary["best_reward"] = 0.9
    run.finish()


EXPECTED_SERIES = {
    "loss": {0: 1.0, 1: 0.9, 2: 0.8, 5: 0.5},
    "acc": {0: 0.1, 5: 0.5},
    "part": {2: 1.0},
    "other": {2: 2.0},
    "env_step": {6: 100.0, 7: 200.0, 8: 200.0},  # step 8: added by W&B's step_sync
    "eval/reward": {100: 0.3, 200: 0.4},
    "reward": {9: 0.2},
    "nested.a": {9: 1.0},
    "late": {12: 1.0},
}


def collapse(wandb: Any, run_id: str, url: str) -> int:
    """Entropy falling to ~0 under a flat reward (the detectors' S2 scenario); then wait for
    rlguard's alert over the REST API before finishing."""
    sys.path.insert(0, str(ROOT))
    from tests.detectors.scenarios import base_config, s2

    config = base_config(300, kl_placement="none", kl_coef=0.0)
    wandb.init(project="collapse", id=run_id, config=config)
    for step, values in s2(random.Random(7), 300)[:COLLAPSE_STEPS]:
        wandb.log(values, step=step)
    alert = _wait_for_alert(f"{url}/api/v1/runs/wandb-collapse-{run_id}/alerts")
    print("alert", json.dumps(alert), flush=True)
    wandb.finish()
    return 0 if alert else 1


def _wait_for_alert(alerts_url: str) -> dict[str, Any] | None:
    deadline = time.monotonic() + ALERT_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(alerts_url, timeout=30) as response:
                found = [a for a in json.loads(response.read())["data"] if _collapse(a)]
        except urllib.error.HTTPError as exc:  # 404 until the sender has created the run
            if exc.code != 404:
                raise
            found = []
        if found:
            return found[0]
        threading.Event().wait(0.2)  # polling the service, not pacing the test
    return None


def _collapse(alert: dict[str, Any]) -> bool:
    return alert["detector"] == "entropy_collapse" and alert["severity"] == "critical"


def steps(wandb: Any, run_id: str, first: int, count: int) -> None:
    """``count`` steps of one key from ``first`` on, in a run resumed if it exists."""
    wandb.init(project="resumed", id=run_id, resume="allow")
    for step in range(first, first + count):
        wandb.log({"score": float(step)}, step=step)
    wandb.finish()


def wait_signal() -> int:
    """Exit 42 on SIGTERM: shows the signal reached this process."""
    received = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: received.set())
    print("ready", flush=True)
    return 42 if received.wait(120) else 1


def main(argv: list[str]) -> int:
    if argv[0] == "wait-signal":
        return wait_signal()
    import wandb

    if argv[0] == "semantics":
        log_step_semantics(wandb, argv[1])
    elif argv[0] == "collapse":
        return collapse(wandb, argv[1], argv[2])
    elif argv[0] == "steps":
        steps(wandb, argv[1], int(argv[2]), int(argv[3]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

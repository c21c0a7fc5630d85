"""Training loops that log to W&B only, with no rlguard code: the W&B tests run them as
processes, with and without ``rlguard watch``.

    python wandb_loop.py semantics RUN_ID      every step rule of W&B's history, once each
    python wandb_loop.py collapse RUN_ID URL   entropy collapsing; waits for rlguard's alert
    python wandb_loop.py steps RUN_ID FIRST N [PROJECT [RESUME]]
                                               N steps, resuming RUN_ID at FIRST
    python wandb_loop.py grow RUN_ID URL N     N steps of 20 keys; finishes once rlguard has
                                               some (read by `rlguard follow wandb`)
    python wandb_loop.py stoppable RUN_ID URL  logs until stopped: asks rlguard to stop it at
                                               step 5, as an engineer on the dashboard would
    python wandb_loop.py wait-signal           prints "ready", exits 42 on SIGTERM
    python wandb_loop.py verl RUN_ID           verl's own Tracking with its wandb backend
    python wandb_loop.py trl RUN_ID URL MODEL  a TRL GRPOTrainer with report_to="wandb", and
                                               rlguard's callback beside it for comparison
    python wandb_loop.py child ARGS...         runs ``wandb_loop.py ARGS...`` as a child process
                                               (``subprocess.run([sys.executable, ...])``)
    python wandb_loop.py ray-actor ARGS...     runs ``steps ARGS...`` in a Ray actor of a local
                                               cluster, as verl's TaskRunner logs
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
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
    alerts = _wait_for(f"{url}/api/v1/runs/wandb-collapse-{run_id}/alerts", _collapse)
    print("alert", json.dumps(alerts[0] if alerts else None), flush=True)
    wandb.finish()
    return 0 if alerts else 1


def _collapse(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        alert
        for alert in answer["data"]
        if alert["detector"] == "entropy_collapse" and alert["severity"] == "critical"
    ]


def grow(wandb: Any, run_id: str, url: str, count: int) -> int:
    """``count`` steps of 20 keys (W&B writes its log in buffered blocks, a few hundred such
    steps each); finish only once rlguard stored some of them, read from the open file."""
    wandb.init(project="followed", id=run_id)
    for step in range(count):
        wandb.log({f"k{j}": float(step * j) for j in range(20)})
    series_url = f"{url}/api/v1/runs/wandb-followed-{run_id}/series?keys=k1"
    seen = _wait_for(series_url, lambda answer: answer["series"].get("k1", {}).get("steps"))
    print("stored while running:", len(seen or []), flush=True)
    wandb.finish()
    return 0 if seen else 1


def _wait_for(url: str, found: Any) -> Any:
    """``found(answer)`` of the first GET of ``url`` for which it is truthy (404 until the run
    exists), or None after ``ALERT_TIMEOUT_S``."""
    deadline = time.monotonic() + ALERT_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                result = found(json.loads(response.read()))
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
            result = None
        if result:
            return result
        threading.Event().wait(0.2)  # polling the service, not pacing the test
    return None


def steps(
    wandb: Any, run_id: str, first: int, count: int, project: str = "resumed", resume: str = "allow"
) -> None:
    """``count`` steps of one key from ``first`` on, in a run resumed if it exists (``resume``:
    W&B's mode)."""
    wandb.init(project=project, id=run_id, resume=resume)
    for step in range(first, first + count):
        wandb.log({"score": float(step)}, step=step)
    wandb.finish()


STOPPABLE_STEPS = 3000  # far more than a stop needs to arrive: ~30 s of logging


def stoppable(wandb: Any, run_id: str, url: str) -> int:
    """Log until interrupted; at step 5 ask rlguard (not W&B) to stop this run."""
    wandb.init(project="stoppable", id=run_id)
    for step in range(STOPPABLE_STEPS):
        wandb.log({"actor/entropy": 1.0, "score": float(step)})
        if step == 5:
            run_url = f"{url}/api/v1/runs/wandb-stoppable-{run_id}"
            _wait_for(run_url, lambda answer: answer.get("id"))  # its first batch made it
            request = urllib.request.Request(
                f"{run_url}/stop",
                data=json.dumps({"reason": "seen enough"}).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            urllib.request.urlopen(request, timeout=30).read()
            print("asked to stop at step 5", flush=True)
        threading.Event().wait(0.01)  # a training step's time
    wandb.finish()
    return 0


def wait_signal() -> int:
    """Exit 42 on SIGTERM: shows the signal reached this process."""
    received = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: received.set())
    print("ready", flush=True)
    return 42 if received.wait(120) else 1


VERL_STEPS = 10


def verl_values(step: int) -> dict[str, float]:
    """What the verl loop logs at ``step``."""
    return {"actor/entropy": 0.5 * math.exp(-step / 5), "critic/score/mean": step / 100}


def verl(run_id: str) -> None:
    """verl's ``Tracking`` as its trainer builds it with ``trainer.logger=['console','wandb']``
    (W&B takes the run id from ``WANDB_RUN_ID``, as a resubmitted job would)."""
    from verl.utils.tracking import Tracking

    os.environ["WANDB_RUN_ID"] = run_id
    config = {"trainer": {"project_name": "verl-watched"}, "data": {"train_batch_size": 8}}
    tracking = Tracking("verl-watched", "exp", ["console", "wandb"], config)
    for step in range(1, VERL_STEPS + 1):
        tracking.log(verl_values(step), step=step)
    tracking.finish()


def trl(run_id: str, url: str, model: str) -> None:
    """Three GRPO steps reported to W&B (``report_to="wandb"``); rlguard's callback, in the same
    trainer, sends the same logs to the run ``callback-RUN_ID``."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlguard.integrations.transformers import RLGuardCallback

    os.environ.update(WANDB_RUN_ID=run_id, WANDB_PROJECT="trl-watched")
    args = GRPOConfig(
        output_dir=str(Path(model).parent / "grpo"),
        max_steps=3,
        logging_steps=1,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=4,
        report_to=["wandb"],
        use_cpu=True,
        save_strategy="no",
    )
    callback = RLGuardCallback(project="trl-callback", run_id=f"callback-{run_id}", url=url)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **kwargs: [float(len(c)) for c in completions],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["a b", "c d"] * 4}),
        callbacks=[callback],
    )
    trainer.train()


def ray_actor(args: list[str]) -> int:
    """``steps`` in a Ray actor, as verl's TaskRunner logs: this driver never imports wandb.
    0 when the actor ran in a process of its own."""
    import ray

    ray.init(num_cpus=1, include_dashboard=False, configure_logging=False)
    try:

        @ray.remote
        class TaskRunner:
            def run(self, args: list[str]) -> int:
                import wandb

                steps(wandb, args[1], int(args[2]), int(args[3]), *args[4:])
                return os.getpid()

        pid = ray.get(TaskRunner.remote().run.remote(args), timeout=240)
    finally:
        ray.shutdown()
    return 0 if pid != os.getpid() else 1


def main(argv: list[str]) -> int:
    if argv[0] == "wait-signal":
        return wait_signal()
    if argv[0] == "verl":
        verl(argv[1])
        return 0
    if argv[0] == "ray-actor":
        return ray_actor(argv[1:])
    if argv[0] == "child":  # this process never imports wandb: only its child logs
        return subprocess.run([sys.executable, __file__, *argv[1:]], check=False).returncode
    import wandb

    if argv[0] == "semantics":
        log_step_semantics(wandb, argv[1])
    elif argv[0] == "collapse":
        return collapse(wandb, argv[1], argv[2])
    elif argv[0] == "grow":
        return grow(wandb, argv[1], argv[2], int(argv[3]))
    elif argv[0] == "stoppable":
        return stoppable(wandb, argv[1], argv[2])
    elif argv[0] == "trl":
        trl(argv[1], argv[2], argv[3])
    elif argv[0] == "steps":
        steps(wandb, argv[1], int(argv[2]), int(argv[3]), *argv[4:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

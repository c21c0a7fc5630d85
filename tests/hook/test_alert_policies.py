"""Alerts that act: stop_on / checkpoint_on in a plain loop and in a real TRL GRPOTrainer."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest

import rlguard
from rlguard.errors import ConfigError
from tests.hook.hookutil import ServiceProcess, api, wait_for
from tests.hook.test_integrations import FAST, offline, tiny_model_dir

__all__ = ["offline"]  # the fixture, used by name below
MAX_STEPS = 60


def test_plain_loop_stops_on_a_critical_alert(
    service: ServiceProcess, run_id: str, spool_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = rlguard.init(
        project="policies",
        run_id=run_id,
        url=service.url,
        spool_dir=str(spool_dir),
        stop_on="critical",
        checkpoint_on="warn",
        **FAST,
    )
    caplog.set_level(logging.WARNING, logger="rlguard")
    for step in range(5):
        run.log({"actor/entropy": 1.0, "actor/pg_loss": 0.1}, step=step)
    assert run.flush(timeout_s=30) and not run.should_stop
    run.log({"actor/entropy": 1.0, "actor/pg_loss": math.nan}, step=5)
    run.log({"actor/entropy": 1.0, "actor/pg_loss": 0.1}, step=6)  # the service holds the
    run.flush(timeout_s=30)  # newest step back until the next one shows it is complete
    wait_for(lambda: run.should_stop, 30, "the stop request")
    assert run.stop_reason is not None and run.stop_reason["detector"] == "nonfinite"
    assert run.checkpoint_request() == run.stop_reason
    assert run.checkpoint_request() is None  # handed out once
    assert any("stop requested by CRITICAL alert" in r.message for r in caplog.records)
    run.finish()


def test_policies_are_off_by_default_and_validated(tmp_path: Path) -> None:
    run = rlguard.init(project="p", url="http://127.0.0.1:9", spool_dir=str(tmp_path), gpu=False)
    run._receive_alert({"id": 1, "severity": "critical", "status": "open"})
    assert not run.should_stop and run.checkpoint_request() is None
    run.finish(timeout_s=0.1)
    with pytest.raises(ConfigError, match="stop_on='fatal'"):
        rlguard.init(project="p", stop_on="fatal", spool_dir=str(tmp_path))


def test_trl_grpo_trainer_stops_on_a_critical_alert(
    service: ServiceProcess, run_id: str, spool_dir: Path, tmp_path: Path, offline: None
) -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlguard.integrations.transformers import RLGuardCallback

    calls = {"n": 0}

    def reward_blows_up(completions: list[str], **kwargs: object) -> list[float]:
        # From the third generation on the reward is infinite: the logged reward (and the
        # loss) go non-finite, which rlguard's D1 flags CRITICAL.
        calls["n"] += 1
        return [math.inf if calls["n"] > 2 else float(len(c)) for c in completions]

    args = GRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        max_steps=MAX_STEPS,
        logging_steps=1,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=4,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=str(tiny_model_dir(tmp_path)),
        reward_funcs=reward_blows_up,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["a b", "c d", "e f", "g h"] * 20}),
    )
    callback = RLGuardCallback.attach(
        trainer,
        project="policies",
        run_id=run_id,
        url=service.url,
        spool_dir=str(spool_dir),
        stop_on="critical",
        checkpoint_on="critical",
        **FAST,
    )
    trainer.train()
    assert 3 <= trainer.state.global_step < MAX_STEPS
    saved = list((tmp_path / "grpo").glob("checkpoint-*"))
    assert saved, "checkpoint_on saved one"
    run = api(service.url, "GET", f"/runs/{run_id}")
    alerts = api(service.url, "GET", f"/runs/{run_id}/alerts")["data"]
    stopper = next(a for a in alerts if a["severity"] == "critical")
    assert stopper["detector"] == "nonfinite"
    assert run["status"] == "stopped"
    assert run["summary"]["stopped_by"] == {"alert": stopper["id"], "detector": "nonfinite"}
    assert callback.run is None  # finished

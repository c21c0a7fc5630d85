"""A TRL trainer given the callback twice (callbacks=[...] and attach) makes one run."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.hook.hookutil import ServiceProcess, api
from tests.hook.test_integrations import FAST, offline, tiny_model_dir

__all__ = ["offline"]  # the fixture, used by name below


def test_trl_attach_after_callbacks_keeps_one_run_with_samples(
    service: ServiceProcess,
    run_id: str,
    spool_dir: Path,
    tmp_path: Path,
    offline: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlguard.integrations.transformers import RLGuardCallback

    args = GRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        max_steps=2,
        logging_steps=1,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=4,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
    )
    project = f"attach-{run_id}"
    first = RLGuardCallback(
        project=project, run_id=run_id, url=service.url, spool_dir=str(spool_dir), **FAST
    )
    trainer = GRPOTrainer(
        model=str(tiny_model_dir(tmp_path)),
        reward_funcs=lambda completions, **kwargs: [float(len(c)) for c in completions],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["a b", "c d"] * 4}),
        callbacks=[first],
    )
    caplog.set_level(logging.WARNING, logger="rlguard")
    second = RLGuardCallback.attach(trainer, project="ignored")
    assert second is first and first.trainer is trainer
    assert "already has an RLGuardCallback" in caplog.text and "['project']" in caplog.text
    trainer.train()
    runs = api(service.url, "GET", f"/runs?project={project}")
    assert runs["count"] == 1 and runs["data"][0]["id"] == run_id
    assert api(service.url, "GET", f"/runs/{run_id}/samples?limit=100")["count"] == 2 * 4

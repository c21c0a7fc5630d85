"""TRL and transformers: ``Trainer(..., callbacks=[RLGuardCallback()])``.

The callback starts a run on the main process when training begins (unless ``rlguard.init()``
already made one current), logs every ``on_log`` at ``state.global_step``, skips the
end-of-training summary, and finishes the run it started when training ends.

Given the trainer (``RLGuardCallback.attach(trainer)``), it also logs the completions of TRL's
GRPO/RLOO trainers as rollout samples: what ``log_completions`` would print or save (prompt,
completion, each reward function's reward, the advantage), read from the trainer's ``_logs`` at
each log step, whether or not ``log_completions`` is on.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from transformers import TrainerCallback

import rlguard

logger = logging.getLogger("rlguard")

SUMMARY_KEYS = frozenset({"train_runtime", "train_samples_per_second", "total_flos"})


def trl_run_config(args: Any, state: Any) -> dict[str, Any]:
    """The trainer's arguments plus the run-config keys rlguard's detectors read (README)."""
    config = {k: v for k, v in args.to_dict().items() if isinstance(v, (int, float, str, bool))}
    beta = getattr(args, "beta", None)
    epsilon = getattr(args, "epsilon", None)
    detector_keys = {
        "kl_coef": beta,
        "kl_placement": None if beta is None else ("loss" if beta else "none"),
        "kl_estimator": "k3" if beta else None,
        "clip_ratio_low": epsilon,
        "clip_ratio_high": getattr(args, "epsilon_high", None) or epsilon,
        "updates_per_batch": getattr(args, "num_iterations", None),
        "planned_steps": getattr(state, "max_steps", None) or None,
    }
    config.update({k: v for k, v in detector_keys.items() if v is not None})
    return config


class RLGuardCallback(TrainerCallback):
    """Streams the trainer's logs to rlguard; ``init_kwargs`` go to ``rlguard.init()``.

    With ``stop_on="critical"`` (or ``"warn"``) training stops after the step at which such an
    alert arrives; with ``checkpoint_on=...`` the trainer saves a checkpoint then. On rank 0
    only: under DDP, the other ranks learn of it only through the trainer's own collectives.
    """

    def __init__(self, trainer: Any = None, **init_kwargs: Any) -> None:
        self.init_kwargs = init_kwargs
        self.trainer = trainer  # a TRL GRPO/RLOO trainer whose completions become samples
        self.run: rlguard.Run | None = None
        self._owns_run = False
        self._last_completions: list[Any] = []

    @classmethod
    def attach(cls, trainer: Any, **init_kwargs: Any) -> RLGuardCallback:
        """Add a callback that also logs the trainer's completions; returns it. A trainer that
        already has one (``callbacks=[RLGuardCallback()]``) keeps it, now logging completions
        too, with a warning: two callbacks would make two runs of the same training."""
        handler = getattr(trainer, "callback_handler", None)
        existing = next((c for c in getattr(handler, "callbacks", ()) if isinstance(c, cls)), None)
        if existing is None:
            callback = cls(trainer=trainer, **init_kwargs)
            trainer.add_callback(callback)
            return callback
        existing.trainer = trainer
        ignored = (
            f"; its settings stand and {sorted(init_kwargs)} are ignored" if init_kwargs else ""
        )
        logger.warning(
            "rlguard: this trainer already has an RLGuardCallback (callbacks=[...]); attach() "
            "makes it log the completions too instead of adding a second run%s",
            ignored,
        )
        return existing

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start a run on the main process, unless ``rlguard.init()`` already made one current."""
        if not state.is_world_process_zero or self.run is not None:
            return
        current = rlguard.current_run()
        if current is not None and not self.init_kwargs and current.active:
            self.run = current
            return
        settings = {"name": getattr(args, "run_name", None), **self.init_kwargs}
        settings.setdefault("config", trl_run_config(args, state))
        self.run = rlguard.init(**settings)
        self._owns_run = True

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        """Log the trainer's logs at the global step (and the completions, with ``attach``)."""
        if not state.is_world_process_zero or self.run is None or not logs:
            return
        if SUMMARY_KEYS & logs.keys():
            return
        self.run.log(dict(logs), step=state.global_step)
        evaluating = any(key.startswith("eval_") for key in logs)
        self._log_completions(state.global_step, "validation" if evaluating else "train")

    def _log_completions(self, step: int, split: str) -> None:
        """The trainer's latest completions as samples, once per generation batch."""
        logs = getattr(self.trainer, "_logs", None)
        if self.run is None or not isinstance(logs, Mapping) or not logs.get("completion"):
            return
        completions = list(logs["completion"])
        if completions == self._last_completions:  # no new generation since the last log
            return
        self._last_completions = completions
        self.run.log_samples(completion_samples(self.trainer, logs), step=step, split=split)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Stop and checkpoint requests (commands, ``stop_on``, ``checkpoint_on``) become the
        trainer's ``should_training_stop`` and ``should_save``."""
        if self.run is None:
            return
        if self.run.checkpoint_request() is not None:
            control.should_save = True
        if self.run.should_stop:
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Finish the run this callback started (``stopped``, by what, when a stop ended it)."""
        if self.run is not None and self._owns_run:
            self.run.finish()
            self.run = None


def completion_samples(trainer: Any, logs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One sample per completion of a TRL trainer's ``_logs``; the reward is the weighted sum
    of the reward functions' rewards (as TRL computes it), each also kept as ``reward_<name>``."""
    rewards = {name: list(values) for name, values in logs.get("rewards", {}).items()}
    weights = _reward_weights(trainer, list(rewards))
    advantages = list(logs.get("advantages", ()))
    group_size = getattr(getattr(trainer, "args", None), "num_generations", None) or 1
    samples = []
    for i, (prompt, completion) in enumerate(zip(logs["prompt"], logs["completion"], strict=False)):
        parts = {name: values[i] for name, values in rewards.items() if i < len(values)}
        scored = [weights[name] * v for name, v in parts.items() if not math.isnan(v)]
        sample: dict[str, Any] = {
            "prompt": message_text(prompt),
            "response": message_text(completion),
            "reward": sum(scored) if scored else math.nan,
            "group": i // group_size,
            **{f"reward_{name}": value for name, value in parts.items()},
        }
        if i < len(advantages):
            sample["advantage"] = advantages[i]
        samples.append(sample)
    return samples


def _reward_weights(trainer: Any, names: list[str]) -> dict[str, float]:
    weights: Any = getattr(trainer, "reward_weights", None)
    listed = weights.tolist() if weights is not None else [1.0] * len(names)
    func_names = list(getattr(trainer, "reward_func_names", names))
    by_name = dict(zip(func_names, listed, strict=False))
    return {name: float(by_name.get(name, 1.0)) for name in names}


def message_text(value: Any) -> str:
    """A prompt or completion as text: plain strings as they are, chat messages as
    ``role: content`` lines."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(m, Mapping) for m in value):
        return "\n".join(f"{m.get('role', '')}: {_content_text(m.get('content'))}" for m in value)
    return str(value)


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # multimodal parts: keep the text ones
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return "" if content is None else str(content)

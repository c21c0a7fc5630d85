"""TRL and transformers: ``Trainer(..., callbacks=[RLGuardCallback()])``.

The callback starts a run on the main process when training begins (unless ``rlguard.init()``
already made one current), logs every ``on_log`` at ``state.global_step``, skips the
end-of-training summary, and finishes the run it started when training ends.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

import rlguard

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
    """Streams the trainer's logs to rlguard; ``init_kwargs`` go to ``rlguard.init()``."""

    def __init__(self, **init_kwargs: Any) -> None:
        self.init_kwargs = init_kwargs
        self.run: rlguard.Run | None = None
        self._owns_run = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
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
        if not state.is_world_process_zero or self.run is None or not logs:
            return
        if SUMMARY_KEYS & logs.keys():
            return
        self.run.log(dict(logs), step=state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is not None and self._owns_run:
            self.run.finish()
            self.run = None

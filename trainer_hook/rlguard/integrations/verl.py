"""verl: follow the ``file`` logger's JSONL, or wrap ``verl.utils.tracking.Tracking`` in-process.

Zero-code route (the trainer runs in a Ray actor): add ``file`` to ``trainer.logger``, set
``VERL_FILE_LOGGER_PATH=/path/metrics.jsonl`` and run ``rlguard follow verl /path/metrics.jsonl``;
with ``trainer.rollout_data_dir=/path/rollouts`` add ``--rollouts /path/rollouts`` to log the
rollouts verl dumps there (``<step>.jsonl``) as samples, and ``--validation DIR`` for the
generations of ``trainer.validation_data_dir`` (split ``validation``).

In-process route: call ``rlguard.integrations.verl.patch_tracking()`` before the trainer builds
its ``Tracking``; inside Ray workers install it with
``ray.init(runtime_env={"worker_process_setup_hook": "rlguard.integrations.verl.install"})``
(settings then come from ``RLGUARD_*`` variables, which ``runtime_env={"env_vars": ...}`` passes).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import rlguard
from rlguard.integrations.importers import _json_line, _nulls_to_nan

logger = logging.getLogger("rlguard")


class JsonlFollower:
    """Tails a verl JSONL file into a run; survives truncation (verl truncates on restart)."""

    def __init__(self, path: Path, run: rlguard.Run) -> None:
        self.path = Path(path)
        self.run = run
        self.steps = 0
        self._offset = 0
        self._partial = ""

    def poll(self) -> int:
        """Read what was appended since the last poll; the number of steps logged."""
        try:
            size = os.path.getsize(self.path)
        except FileNotFoundError:
            return 0
        if size < self._offset:  # truncated: a restarted trainer rewrites from its checkpoint
            logger.info("rlguard: %s was truncated; following it from the start", self.path)
            self._offset, self._partial = 0, ""
        if size == self._offset:
            return 0
        with open(self.path, encoding="utf-8", errors="replace") as handle:
            handle.seek(self._offset)
            text = self._partial + handle.read()
            self._offset = handle.tell()
        *lines, self._partial = text.split("\n")
        logged = 0
        for line in lines:
            record = _json_line(line)
            if record is not None and "step" in record:
                self.run.log(_nulls_to_nan(record.get("data", {})), step=int(record["step"]))
                logged += 1
        self.steps += logged
        return logged

    def follow(self, stop: threading.Event, poll_s: float = 0.5, idle_exit_s: float | None = None):
        """Poll until ``stop`` is set, or until nothing was appended for ``idle_exit_s``."""
        follow_all([self], stop, poll_s, idle_exit_s)


VERL_ROLLOUT_FIELDS = {"input": "prompt", "output": "response", "score": "reward"}


class RolloutDirFollower:
    """Logs the rollouts verl dumps to ``trainer.rollout_data_dir`` as samples.

    verl writes one ``<step>.jsonl`` per step, a line per generation: ``input``, ``output``,
    ``gts`` (older versions), ``score``, ``step`` and the reward function's extra fields. A file
    is read once it ends with a newline; one rewritten by a restarted trainer is read again (its
    samples replace the stored ones).
    """

    def __init__(self, folder: Path, run: rlguard.Run, split: str = "train") -> None:
        self.folder = Path(folder)
        self.run = run
        self.split = split
        self.samples = 0
        self._sizes: dict[str, int] = {}

    def poll(self) -> int:
        """Log the dump files that are new or rewritten; the number of samples logged."""
        logged = sum(self.log_file(path, text) for path, text in self.pending())
        self.samples += logged
        return logged

    def pending(self) -> Iterator[tuple[Path, str]]:
        """The complete dump files not read yet (or rewritten since), in step order."""
        for path in sorted(self.folder.glob("*.jsonl"), key=lambda p: (len(p.stem), p.stem)):
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            if not path.stem.isdigit() or self._sizes.get(path.name) == size:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            if text.endswith("\n"):  # else verl is still writing it
                self._sizes[path.name] = size
                yield path, text

    def log_file(self, path: Path, text: str) -> int:
        """Log one dump file's lines as the samples of its step; how many there were."""
        records = [r for r in map(_json_line, text.splitlines()) if r is not None]
        samples = [rollout_sample(r) for r in records]
        self.run.log_samples(samples, step=int(path.stem), split=self.split)
        return len(records)


def rollout_sample(record: Mapping[str, Any]) -> dict[str, Any]:
    """One line of a verl rollout dump as a sample; non-numeric extra fields are left out."""
    sample: dict[str, Any] = {
        key: value
        for key, value in record.items()
        if key not in VERL_ROLLOUT_FIELDS and isinstance(value, (int, float))
    }
    sample.pop("step", None)
    sample.update((name, record.get(key)) for key, name in VERL_ROLLOUT_FIELDS.items())
    gts = record.get("gts")
    if gts is not None:
        sample["ground_truth"] = gts if isinstance(gts, str) else json.dumps(gts)
    return sample


def follow_all(
    followers: Sequence[Any], stop: threading.Event, poll_s: float, idle_exit_s: float | None
) -> None:
    """Poll every follower until ``stop`` is set, or until none had news for ``idle_exit_s``."""
    idle = 0.0
    while not stop.is_set():
        if sum(follower.poll() for follower in followers):
            idle = 0.0
        else:
            idle += poll_s
            if idle_exit_s is not None and idle >= idle_exit_s:
                return
        stop.wait(poll_s)


def run_config(config: Any) -> dict[str, Any]:
    """The verl config as plain data, plus the run-config keys the detectors read (README)."""
    data = _to_container(config)
    actor = _get(data, "actor_rollout_ref", "actor") or {}
    algorithm = data.get("algorithm") or {}
    kl_ctrl = algorithm.get("kl_ctrl") or {}
    use_kl_loss = bool(actor.get("use_kl_loss"))
    detector_keys = {
        "clip_ratio_low": actor.get("clip_ratio_low", actor.get("clip_ratio")),
        "clip_ratio_high": actor.get("clip_ratio_high", actor.get("clip_ratio")),
        "clip_ratio_c": actor.get("clip_ratio_c"),
        "kl_placement": "loss"
        if use_kl_loss
        else ("reward" if algorithm.get("use_kl_in_reward") else "none"),
        "kl_estimator": actor.get("kl_loss_type") if use_kl_loss else algorithm.get("kl_penalty"),
        "kl_coef": actor.get("kl_loss_coef") if use_kl_loss else kl_ctrl.get("kl_coef"),
        "kl_ctrl_type": kl_ctrl.get("type"),
        "kl_target": kl_ctrl.get("target_kl"),
        "kl_horizon": kl_ctrl.get("horizon"),
        "entropy_coeff": actor.get("entropy_coeff"),
        "planned_steps": _get(data, "trainer", "total_training_steps"),
        "updates_per_batch": _updates_per_batch(data, actor),
        "sequences_per_step": _sequences_per_step(data),
    }
    return {**{k: v for k, v in detector_keys.items() if v is not None}, "verl": data}


def _updates_per_batch(data: dict[str, Any], actor: dict[str, Any]) -> int | None:
    batch = _get(data, "data", "train_batch_size")
    mini = actor.get("ppo_mini_batch_size")
    if not batch or not mini:
        return None
    return int(actor.get("ppo_epochs", 1)) * max(1, int(batch) // int(mini))


def _sequences_per_step(data: dict[str, Any]) -> int | None:
    batch = _get(data, "data", "train_batch_size")
    n = _get(data, "actor_rollout_ref", "rollout", "n") or 1
    return int(batch) * int(n) if batch else None


def _get(data: Mapping[str, Any], *path: str) -> Any:
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)  # type: ignore[assignment]
    return data


def _to_container(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(config):
            container = OmegaConf.to_container(config, resolve=True)
            return {str(k): v for k, v in container.items()} if isinstance(container, dict) else {}
    except ImportError:
        pass
    return dict(config) if isinstance(config, Mapping) else {}


def patch_tracking(tracking_class: type | None = None, **init_kwargs: Any) -> bool:
    """Make every ``Tracking`` also log to rlguard; False when verl is not installed."""
    if tracking_class is None:
        try:
            from verl.utils.tracking import Tracking
        except ImportError:
            logger.info("rlguard: verl is not installed; Tracking not patched")
            return False
        tracking_class = Tracking
    if getattr(tracking_class, "_rlguard_patched", False):
        return True
    cls: Any = tracking_class
    original_init, original_log = cls.__init__, cls.log

    @functools.wraps(original_init)
    def __init__(self: Any, project_name: str, experiment_name: str, *args: Any, **kw: Any) -> None:
        original_init(self, project_name, experiment_name, *args, **kw)
        config = kw.get("config", args[1] if len(args) > 1 else None)
        settings = {"project": project_name, "name": experiment_name, **init_kwargs}
        self._rlguard_run = rlguard.init(config=run_config(config), **settings)

    @functools.wraps(original_log)
    def log(self: Any, data: Mapping[str, Any], step: int, *args: Any, **kw: Any) -> Any:
        result = original_log(self, data, step, *args, **kw)
        run = getattr(self, "_rlguard_run", None)
        if run is not None:
            run.log(data, step=step)
        return result

    for name, value in (("__init__", __init__), ("log", log), ("_rlguard_patched", True)):
        setattr(tracking_class, name, value)
    return True


def install() -> None:
    """A Ray ``worker_process_setup_hook``: patch verl's Tracking in every worker process."""
    patch_tracking()

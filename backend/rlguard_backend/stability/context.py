"""Run context the detectors need, read once from the run's config (flat keys, or verl/TRL style).

The keys read, and the verl/TRL names each falls back to, are listed in the README ("Run config
keys read"); the first found wins, flat before nested.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlguard_backend.signals import validate_aliases

_VERL_ACTOR = "actor_rollout_ref.actor."
_VERL_KL_CTRL = "algorithm.kl_ctrl."
# Each framework's bound on how many policy versions old a trained sample may be. verl's
# async_training.staleness_threshold is a share of stale samples, not versions: not read.
_MAX_STALENESS = (
    "trainer.v1.sampler.max_off_policy_threshold",  # verl v1 async trainer (default 8)
    "orchestrator.max_off_policy_steps",  # prime-rl (default 8)
    "max_off_policy_steps",
    "max_async_level",  # prime-rl before May 2026 (PR #2631 fixed it at 1)
    "orchestrator.max_async_level",
    "async_level",
    "rollout.max_head_offpolicyness",  # AReaL (0 = synchronous)
    "max_head_offpolicyness",
    "grpo.async_grpo.max_trajectory_age_steps",  # NeMo-RL (1 recommended)
    "max_trajectory_age_steps",
    "max_policy_version_lag",  # slime --max-policy-version-lag (PR #2278)
)


@dataclass(frozen=True)
class RunContext:
    """What the detectors know about the run's setup; None means the config did not say."""

    updates_per_batch: float | None = None  # U, optimizer updates per rollout batch
    kl_placement: str | None = None  # "reward" | "loss" | "none"
    reference: str | None = None  # "initial" | "teacher": what the KL is measured against
    kl_coef: float | None = None
    kl_controller: str | None = None  # "fixed" | "adaptive"
    kl_target: float | None = None
    kl_horizon: float | None = None
    sequences_per_step: float | None = None  # n, sequences per batch fed to the controller
    ppo_kl_target: float | None = None  # kappa, D4's per-update KL budget (SB3 target_kl)
    reward_min: float | None = None
    reward_max: float | None = None
    planned_steps: float | None = None
    max_staleness: float | None = None  # K, the policy versions an async pipeline allows
    signal_aliases: Mapping[str, str | None] | None = None
    thresholds: Mapping[str, Any] | None = None  # rlguard_thresholds: per-run overrides

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> RunContext:
        """Parse a run config; unknown keys are ignored, malformed known ones raise ValueError."""
        config = config or {}
        return cls(
            updates_per_batch=_updates_per_batch(config),
            kl_placement=_kl_placement(config),
            reference=_reference(config),
            kl_coef=_kl_coef(config),
            kl_controller=_kl_controller(config),
            kl_target=_number(config, "kl_target", _VERL_KL_CTRL + "target_kl", "target"),
            kl_horizon=_number(config, "kl_horizon", _VERL_KL_CTRL + "horizon", "horizon"),
            sequences_per_step=_sequences_per_step(config),
            ppo_kl_target=_number(config, "ppo_kl_target"),
            reward_min=_number(config, "reward_min"),
            reward_max=_number(config, "reward_max"),
            planned_steps=_number(
                config, "planned_steps", "trainer.total_training_steps", "max_steps"
            ),
            max_staleness=_number(config, "max_staleness", *_MAX_STALENESS),
            signal_aliases=validate_aliases(_find(config, "signal_aliases")),
            thresholds=_find(config, "rlguard_thresholds"),
        )


def _find(config: Mapping[str, Any], *paths: str) -> Any:
    """First value found among flat keys or dotted paths into nested dicts."""
    for path in paths:
        if path in config and config[path] is not None:
            return config[path]
        node: Any = config
        for part in path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is not None:
            return node
    return None


def _number(config: Mapping[str, Any], *paths: str) -> float | None:
    value = _find(config, *paths)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"run config {paths[0]!r} = {value!r} must be a number")
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"run config {paths[0]!r} = {value!r} must be a number") from None


def _text(config: Mapping[str, Any], *paths: str) -> str | None:
    value = _find(config, *paths)
    return None if value is None else str(value).lower()


def _updates_per_batch(config: Mapping[str, Any]) -> float | None:
    explicit = _number(config, "updates_per_batch")
    if explicit is not None:
        return explicit
    epochs = _number(config, "ppo_epochs", _VERL_ACTOR + "ppo_epochs")
    if epochs is not None:
        batch = _number(config, "train_batch_size", "data.train_batch_size")
        mini = _number(config, "ppo_mini_batch_size", _VERL_ACTOR + "ppo_mini_batch_size")
        return epochs * (batch / mini if batch and mini else 1.0)
    iterations = _number(config, "num_iterations")
    if iterations is not None:
        return iterations * (_number(config, "steps_per_generation") or 1.0)
    return None


def _kl_placement(config: Mapping[str, Any]) -> str | None:
    placement = _text(config, "kl_placement")
    if placement is not None:
        if placement not in ("reward", "loss", "none"):
            raise ValueError(
                f"run config 'kl_placement' = {placement!r} must be 'reward', 'loss' or 'none'"
            )
        return placement
    in_reward = _find(config, "use_kl_in_reward", "algorithm.use_kl_in_reward")
    in_loss = _find(config, "use_kl_loss", _VERL_ACTOR + "use_kl_loss")
    if in_reward or in_loss:
        return "reward" if in_reward else "loss"
    beta = _number(config, "beta")
    if beta is not None:
        return "loss" if beta > 0 else "none"
    if in_reward is False and in_loss is False:
        return "none"
    return None


REFERENCES = ("initial", "teacher")


def _reference(config: Mapping[str, Any]) -> str | None:
    """What the KL is measured against: the policy's own start, or a teacher (a run config
    naming a teacher model, as TRL's GKD and GOLD configs do, means a teacher)."""
    reference = _text(config, "reference")
    if reference is not None:
        if reference not in REFERENCES:
            raise ValueError(
                f"run config 'reference' = {reference!r} must be 'initial' (the policy's own "
                "starting point) or 'teacher' (another model, as in on-policy distillation)"
            )
        return reference
    return "teacher" if _find(config, "teacher_model_name_or_path") is not None else None


def _kl_coef(config: Mapping[str, Any]) -> float | None:
    explicit = _number(config, "kl_coef", "beta", "init_kl_coef")
    if explicit is not None:
        return explicit
    if _kl_placement(config) == "reward":
        return _number(config, _VERL_KL_CTRL + "kl_coef")
    return _number(config, _VERL_ACTOR + "kl_loss_coef")


def _kl_controller(config: Mapping[str, Any]) -> str | None:
    kind = _text(config, "kl_controller", "kl_ctrl_type", _VERL_KL_CTRL + "type")
    if kind is not None:
        return kind
    adaptive = _find(config, "adap_kl_ctrl")
    return None if adaptive is None else ("adaptive" if adaptive else "fixed")


def _sequences_per_step(config: Mapping[str, Any]) -> float | None:
    explicit = _number(config, "sequences_per_step")
    if explicit is not None:
        return explicit
    prompts = _number(config, "data.train_batch_size")
    samples = _number(config, "actor_rollout_ref.rollout.n")
    return prompts * (samples or 1.0) if prompts else None

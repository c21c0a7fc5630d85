"""The alias table of METRICS.md and run-config overrides."""

from __future__ import annotations

import pytest

from rlguard_backend.signals import (
    ALIASES,
    SIGNAL_NAMES,
    SIGNALS,
    canonical_signal,
    validate_aliases,
)

ALIAS_CASES = [
    ("actor/ppo_kl", "ppo_kl"),
    ("ppo_kl", "ppo_kl"),
    ("train/ppo_kl", "ppo_kl"),
    ("actor/policykl", "ppo_kl"),
    ("ppo_actor/update/approx_kl/avg", "ppo_kl"),
    ("actor/pg_clipfrac", "clipfrac"),
    ("clip_ratio/region_mean", "clipfrac"),
    ("ppo_clip_ratio", "clipfrac"),
    ("actor/clipfrac", "clipfrac"),
    ("clip_ratio/low_mean", "clipfrac_low"),
    ("clip_ratio/high_mean", "clipfrac_high"),
    ("actor/ppo_ratio_high_clipfrac", "clipfrac_high"),
    ("actor/pg_clipfrac_lower", "clipfrac_dual"),  # verl: dual-clip, not the lower side
    ("actor/entropy", "entropy"),
    ("actor/entropy_loss", "entropy"),  # verl <= v0.3
    ("entropy", "entropy"),
    ("entropy_loss", "entropy"),
    ("train/entropy_loss", "entropy"),
    ("train/approx_entropy", "entropy"),
    ("actor/kl_loss", "kl_loss"),
    ("kl", "kl_loss"),
    ("train/kl_loss", "kl_loss"),
    ("actor/kl_coef", "kl_coef"),
    ("actor/reward_kl_penalty", "reward_kl_penalty"),
    ("critic/kl", "reward_kl_penalty"),  # old verl
    ("actor/reward_kl_penalty_coeff", "reward_kl_coef"),
    ("critic/kl_coeff", "reward_kl_coef"),  # old verl
    ("critic/kl_coef", "reward_kl_coef"),  # ROLL
    ("objective/kl", "kl_ref_seq"),  # old TRL: per-sequence sum
    ("critic/score/mean", "reward_mean"),
    ("critic/rewards/mean", None),  # includes the KL penalty: not the task reward
    ("reward", "reward_mean"),
    ("rollout/reward_mean", "reward_mean"),
    ("train/reward", "reward_mean"),
    ("reward_std", "reward_std"),
    ("frac_reward_zero_std", "frac_zero_std"),
    ("response_length/mean", "response_length"),
    ("completions/mean_length", "response_length"),
    ("completion_length", "response_length"),
    ("response_length/clip_ratio", "response_clip_ratio"),
    ("completions/clipped_ratio", "response_clip_ratio"),
    ("rollout/truncated_rate", "response_clip_ratio"),
    ("actor/pg_loss", "pg_loss"),
    ("loss", "pg_loss"),
    ("policy_loss", "pg_loss"),
    ("actor/grad_norm", "grad_norm"),
    ("grad_norm", "grad_norm"),
    ("actor_grad_norm", "grad_norm"),
    ("actor/lr", "lr"),
    ("learning_rate", "lr"),
    ("timing_s/step", "step_time"),
    ("probe/cov_logp_adv", "cov_logp_adv"),
    ("actor/entropy_cov", "cov_logp_adv"),
    ("training/off_policy/trajectory_staleness/mean", "rollout_staleness"),  # verl v1
    ("training/off_policy/trajectory_spans/mean", None),  # versions per trajectory, not a lag
    ("train/avg_trajectory_age", "rollout_staleness"),  # NeMo-RL
    ("ppo_actor/update/version_stats/sample_staleness_theta_avg", "rollout_staleness"),  # AReaL
    ("off_policy/mean", "rollout_staleness"),  # prime-rl
    ("moe/max_vio/avg", "moe_max_vio"),  # VeOmni engine
    ("rollout/moe/max_vio/avg", "moe_max_vio"),  # verl rollout side
    ("max_vio/mean", "moe_max_vio"),  # prime-rl
    ("rollout/moe/avg_vio/avg", "moe_avg_vio"),
    ("routing_confidence/mean", "moe_routing_confidence"),
    ("r3/routed_experts_fallback_token_route_fraction", "moe_fallback_fraction"),  # NeMo-RL
    ("system/gpu0/util", None),
    ("my/custom_metric", None),
]


@pytest.mark.parametrize(("key", "signal"), ALIAS_CASES)
def test_canonical_signal_maps_known_trainer_keys(key: str, signal: str | None) -> None:
    assert canonical_signal(key) == signal


@pytest.mark.parametrize(
    ("aliases", "key", "signal"),
    [
        ({"kl": "reward_kl_penalty"}, "kl", "reward_kl_penalty"),  # RLOO's kl is in-reward k1
        ({"my/kl": "kl_loss"}, "my/kl", "kl_loss"),
        ({"entropy": None}, "entropy", None),
        ({"other": "kl_loss"}, "entropy", "entropy"),
    ],
)
def test_canonical_signal_prefers_user_aliases(
    aliases: dict[str, str | None], key: str, signal: str | None
) -> None:
    assert canonical_signal(key, aliases) == signal


def test_signals_every_alias_targets_a_declared_signal() -> None:
    assert set(ALIASES.values()) <= SIGNAL_NAMES
    assert len({signal.name for signal in SIGNALS}) == len(SIGNALS)
    assert all(signal.description and signal.unit for signal in SIGNALS)


def test_validate_aliases_rejects_unknown_signal_naming_the_key() -> None:
    with pytest.raises(ValueError, match="my/kl"):
        validate_aliases({"my/kl": "kl_divergence"})

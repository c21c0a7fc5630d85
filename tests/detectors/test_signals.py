"""The alias table of METRICS.md and run-config overrides."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlguard_backend.signals import (
    ALIASES,
    SIGNAL_NAMES,
    SIGNALS,
    canonical_signal,
    keys_by_signal,
    validate_aliases,
)
from rlguard_backend.stability import DetectorSuite

from . import scenarios as sc

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


# One training step of each framework as it reaches W&B: the keys its source logs (see the
# comments of signals.py), with keys of another definition or unit beside them. The values are
# only plausible; the keys are what is tested.
FRAMEWORK_STEPS: dict[str, dict[str, float]] = {
    "verl": {
        "actor/ppo_kl": 1e-4,
        "actor/pg_clipfrac": 0.002,
        "actor/pg_clipfrac_lower": 0.0,
        "actor/entropy": 0.42,
        "actor/kl_loss": 0.003,
        "actor/kl_coef": 0.001,
        "actor/reward_kl_penalty": 0.01,
        "actor/reward_kl_penalty_coeff": 0.001,
        "critic/score/mean": 0.4,
        "critic/rewards/mean": 0.39,
        "response_length/mean": 310.0,
        "response_length/clip_ratio": 0.01,
        "actor/pg_loss": 0.02,
        "actor/grad_norm": 0.5,
        "actor/lr": 1e-6,
        "timing_s/step": 42.0,
        "rollout_corr/k3_kl": 1e-3,
        "rollout_corr/log_ppl_abs_diff": 0.02,
    },
    "TRL": {
        "clip_ratio/region_mean": 0.002,
        "clip_ratio/low_mean": 0.001,
        "clip_ratio/high_mean": 0.001,
        "entropy": 0.42,
        "kl": 0.003,
        "reward": 0.4,
        "reward_std": 0.3,
        "frac_reward_zero_std": 0.2,
        "completions/mean_length": 310.0,
        "completions/clipped_ratio": 0.01,
        "loss": 0.02,
        "grad_norm": 0.5,
        "learning_rate": 1e-6,
        "step_time": 12.0,
        "epoch": 0.1,
    },
    "OpenRLHF": {
        "ppo_kl": 1e-4,
        "ppo_clip_ratio": 0.002,
        "entropy_loss": 0.42,
        "kl": 0.003,
        "reward": 0.4,
        "rollout/reward_std": 0.3,
        "response_length": 310.0,
        "truncated": 0.01,
        "policy_loss": 0.02,
        "actor_grad_norm": 0.5,
        "actor_lr": 1e-6,
        "timing/step_total": 42.0,
    },
    "slime": {
        "train/loss": 0.02,
        "train/pg_loss": 0.02,
        "train/entropy_loss": 0.42,
        "train/pg_clipfrac": 0.002,
        "train/ppo_kl": 1e-4,
        "train/kl_loss": 0.003,
        "train/train_rollout_logprob_abs_diff": 0.02,
        "train/grad_norm": 0.5,
        "train/lr-pg_0": 1e-6,
        "train/global_batch_size": 256.0,
        "rollout/raw_reward": 0.4,
        "rollout/rewards": 0.0,
        "rollout/response_len/mean": 310.0,
        "rollout/truncated_ratio": 0.01,
        "rollout/zero_std/count_0.0": 3.0,
    },
    "prime-rl": {
        "entropy/all/mean": 0.42,
        "mismatch_kl/all/mean": 1e-3,
        "loss/mean": 0.02,
        "optim/grad_norm": 0.5,
        "optim/lr": 1e-6,
        "time/step": 42.0,
        "perf/mfu": 0.3,
        "train/agg/effective/num_output_tokens/mean": 310.0,
        "train/agg/all/num_output_tokens/mean": 290.0,
        "train/agg/effective/default/reward/mean": 0.4,
        "train/agg/effective/default/is_truncated/mean": 0.01,
    },
    "NeMo-RL": {
        "train/loss": 0.02,
        "train/approx_entropy": 0.42,
        "train/kl_penalty": 0.003,
        "train/gen_kl_error": 1e-3,
        "train/token_mult_prob_error": 1.01,
        "train/reward": 0.4,
        "train/mean_gen_tokens_per_sample": 310.0,
        "train/truncation_rate": 0.01,
        "train/grad_norm": 0.5,
        "train/lr": 1e-6,
        "train/baseline_reward/pct_mixed": 60.0,
        "timing/train/total_step_time": 42.0,
    },
    "AReaL": {
        "ppo_actor/update/approx_kl/avg": -1e-4,
        "ppo_actor/update/clip_ratio/avg": 0.002,
        "ppo_actor/update/dual_clip_ratio/avg": 0.0,
        "ppo_actor/update/entropy/avg": 0.42,
        "ppo_actor/update/actor_loss/avg": 0.02,
        "ppo_actor/update/grad_norm": 0.5,
        "ppo_actor/update/lr": 1e-6,
        "ppo_actor/task_reward/avg": 0.4,
        "ppo_actor/seq_len/avg": 410.0,
        "ppo_actor/no_eos_ratios/avg": 0.01,
        "timeperf/train_step": 30.0,
    },
    "ROLL": {
        "actor/policykl": -1e-4,
        "actor/approxkl": 1e-8,
        "actor/clipfrac": 0.002,
        "actor/ppo_ratio_clipfrac": 0.003,
        "actor/ppo_ratio_low_clipfrac": 0.001,
        "actor/ppo_ratio_high_clipfrac": 0.002,
        "actor/pg_loss": 0.02,
        "actor/kl_loss": 0.003,
        "actor/total_loss": 0.02,
        "actor/lr": 1e-6,
        "actor_train/grad_norm": 0.5,
        "critic/entropy/mean": 0.42,
        "critic/kl": 0.01,
        "critic/kl_coef": 0.001,
        "critic/score/mean": 0.4,
        "token/response_length/mean": 310.0,
        "token/total_response_length/clip": 2.0,
        "group/mixed_groups_ratio": 0.6,
        "time/step_total": 42.0,
    },
    "SkyRL": {
        "policy/final_loss": 0.02,
        "policy/policy_loss": 0.02,
        "policy/policy_entropy": 0.42,
        "policy/policy_kl": 0.003,
        "policy/loss_metrics/clip_ratio": 0.002,
        "policy/policy_lr": 1e-6,
        "policy/grad_norm": 0.5,
        "policy/rollout_train_logprobs_abs_diff_mean": 0.02,
        "loss/avg_kl": 0.01,
        "loss/kl_loss_coef": 0.001,
        "reward/avg_raw_reward": 0.4,
        "generate/avg_num_tokens": 310.0,
        "timing/step": 42.0,
    },
}

# The signal each step above gives, and the key it is read from (the first when several).
FRAMEWORK_SIGNALS: dict[str, dict[str, str]] = {
    "verl": {
        "ppo_kl": "actor/ppo_kl",
        "clipfrac": "actor/pg_clipfrac",
        "clipfrac_dual": "actor/pg_clipfrac_lower",
        "entropy": "actor/entropy",
        "kl_loss": "actor/kl_loss",
        "kl_coef": "actor/kl_coef",
        "reward_kl_penalty": "actor/reward_kl_penalty",
        "reward_kl_coef": "actor/reward_kl_penalty_coeff",
        "reward_mean": "critic/score/mean",
        "response_length": "response_length/mean",
        "response_clip_ratio": "response_length/clip_ratio",
        "pg_loss": "actor/pg_loss",
        "grad_norm": "actor/grad_norm",
        "lr": "actor/lr",
        "step_time": "timing_s/step",
        "rollout_kl": "rollout_corr/k3_kl",
        "rollout_logprob_diff": "rollout_corr/log_ppl_abs_diff",
    },
    "TRL": {
        "clipfrac": "clip_ratio/region_mean",
        "clipfrac_low": "clip_ratio/low_mean",
        "clipfrac_high": "clip_ratio/high_mean",
        "entropy": "entropy",
        "kl_loss": "kl",
        "reward_mean": "reward",
        "reward_std": "reward_std",
        "frac_zero_std": "frac_reward_zero_std",
        "response_length": "completions/mean_length",
        "response_clip_ratio": "completions/clipped_ratio",
        "pg_loss": "loss",
        "grad_norm": "grad_norm",
        "lr": "learning_rate",
        "step_time": "step_time",
    },
    "OpenRLHF": {
        "ppo_kl": "ppo_kl",
        "clipfrac": "ppo_clip_ratio",
        "entropy": "entropy_loss",
        "kl_loss": "kl",
        "reward_mean": "reward",
        "reward_std": "rollout/reward_std",
        "response_length": "response_length",
        "response_clip_ratio": "truncated",
        "pg_loss": "policy_loss",
        "grad_norm": "actor_grad_norm",
        "lr": "actor_lr",
        "step_time": "timing/step_total",
    },
    "slime": {
        "ppo_kl": "train/ppo_kl",
        "clipfrac": "train/pg_clipfrac",
        "entropy": "train/entropy_loss",
        "kl_loss": "train/kl_loss",
        "reward_mean": "rollout/raw_reward",
        "response_length": "rollout/response_len/mean",
        "response_clip_ratio": "rollout/truncated_ratio",
        "pg_loss": "train/pg_loss",
        "grad_norm": "train/grad_norm",
        "lr": "train/lr-pg_0",
        "rollout_logprob_diff": "train/train_rollout_logprob_abs_diff",
    },
    "prime-rl": {
        "entropy": "entropy/all/mean",
        "response_length": "train/agg/effective/num_output_tokens/mean",
        "grad_norm": "optim/grad_norm",
        "lr": "optim/lr",
        "step_time": "time/step",
        "rollout_kl": "mismatch_kl/all/mean",
    },
    "NeMo-RL": {
        "entropy": "train/approx_entropy",
        "kl_loss": "train/kl_penalty",
        "pg_loss": "train/loss",
        "reward_mean": "train/reward",
        "response_length": "train/mean_gen_tokens_per_sample",
        "response_clip_ratio": "train/truncation_rate",
        "grad_norm": "train/grad_norm",
        "lr": "train/lr",
        "step_time": "timing/train/total_step_time",
        "rollout_kl": "train/gen_kl_error",
    },
    "AReaL": {
        "ppo_kl": "ppo_actor/update/approx_kl/avg",
        "clipfrac": "ppo_actor/update/clip_ratio/avg",
        "clipfrac_dual": "ppo_actor/update/dual_clip_ratio/avg",
        "entropy": "ppo_actor/update/entropy/avg",
        "reward_mean": "ppo_actor/task_reward/avg",
        "pg_loss": "ppo_actor/update/actor_loss/avg",
        "grad_norm": "ppo_actor/update/grad_norm",
        "lr": "ppo_actor/update/lr",
    },
    "ROLL": {
        "ppo_kl": "actor/policykl",
        "clipfrac": "actor/clipfrac",
        "clipfrac_low": "actor/ppo_ratio_low_clipfrac",
        "clipfrac_high": "actor/ppo_ratio_high_clipfrac",
        "entropy": "critic/entropy/mean",
        "kl_loss": "actor/kl_loss",
        "reward_kl_penalty": "critic/kl",
        "reward_kl_coef": "critic/kl_coef",
        "reward_mean": "critic/score/mean",
        "response_length": "token/response_length/mean",
        "pg_loss": "actor/pg_loss",
        "grad_norm": "actor_train/grad_norm",
        "lr": "actor/lr",
        "step_time": "time/step_total",
    },
    "SkyRL": {
        "clipfrac": "policy/loss_metrics/clip_ratio",
        "entropy": "policy/policy_entropy",
        "kl_loss": "policy/policy_kl",
        "reward_kl_penalty": "loss/avg_kl",
        "reward_kl_coef": "loss/kl_loss_coef",
        "reward_mean": "reward/avg_raw_reward",
        "response_length": "generate/avg_num_tokens",
        "pg_loss": "policy/policy_loss",
        "grad_norm": "policy/grad_norm",
        "lr": "policy/policy_lr",
        "step_time": "timing/step",
        "rollout_logprob_diff": "policy/rollout_train_logprobs_abs_diff_mean",
    },
}

# Keys named by the data (prime-rl's per-agent reward): the run config's signal_aliases.
FRAMEWORK_RUN_ALIASES: dict[str, dict[str, str | None]] = {
    "prime-rl": {"train/agg/effective/default/reward/mean": "reward_mean"},
}

WANDB_DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "wandb.md"


@pytest.mark.parametrize("framework", FRAMEWORK_STEPS)
def test_keys_by_signal_maps_each_frameworks_step_onto_its_signals(framework: str) -> None:
    found = keys_by_signal(FRAMEWORK_STEPS[framework])
    assert {signal: keys[0] for signal, keys in found.items()} == FRAMEWORK_SIGNALS[framework]


def test_docs_framework_table_lists_the_signals_each_framework_logs() -> None:
    rows = {}
    for line in WANDB_DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0] in FRAMEWORK_STEPS | {"TRL (GRPO)": {}}:
            rows[cells[0].removesuffix(" (GRPO)")] = set(re.findall(r"`(\w+)`", cells[2]))
    assert rows == {name: set(signals) for name, signals in FRAMEWORK_SIGNALS.items()}


def framework_run(framework: str, scenario: sc.Scenario, seed: int) -> list[sc.Step]:
    """A scenario's run under a framework's keys: each verl key becomes the framework's key of
    the same signal; signals the framework does not log are dropped."""
    key_of = dict(FRAMEWORK_SIGNALS[framework])
    for key, signal in FRAMEWORK_RUN_ALIASES.get(framework, {}).items():
        if signal is not None:
            key_of[signal] = key
    return [
        (
            step,
            {key_of[name]: v for k, v in values.items() if (name := canonical_signal(k)) in key_of},
        )
        for step, values in scenario.run(seed)
    ]


@pytest.mark.parametrize("framework", FRAMEWORK_STEPS)
def test_entropy_collapse_fires_on_each_frameworks_keys(framework: str) -> None:
    scenario = next(s for s in sc.SCENARIOS if s.name == "S2_early_collapse")
    config = {**scenario.config, "signal_aliases": FRAMEWORK_RUN_ALIASES.get(framework, {})}
    suite = DetectorSuite(config)
    events = [
        e
        for step, values in framework_run(framework, scenario, 0)
        for e in suite.feed(step, values)
    ]
    expect = scenario.must_fire[0]
    assert (expect.detector, expect.severity) == ("entropy_collapse", "critical")
    # Without a response length to back the fall (AReaL logs none), critical comes later.
    last = expect.last if "response_length" in FRAMEWORK_SIGNALS[framework] else 50
    step = sc.first_reached(events, expect.detector, expect.key, expect.severity)
    assert step is not None and expect.first <= step <= last, (framework, step)

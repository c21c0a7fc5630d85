"""Canonical signals and the alias table that maps trainer metric keys onto them (METRICS.md).

Every key is stored exactly as the trainer logged it; detectors and panels read canonical
signals. A run can extend or override the table with its config key ``signal_aliases``
(``{"my/kl": "kl_loss", "noise": None}``; ``None`` ignores a key).

>>> canonical_signal("actor/pg_clipfrac")
'clipfrac'
>>> canonical_signal("kl", {"kl": "reward_kl_penalty"})
'reward_kl_penalty'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Signal:
    """One canonical signal: its name, what it means and its unit."""

    name: str
    description: str
    unit: str


_SIGNAL_ROWS = (
    # name, description, unit
    ("ppo_kl", "KL of the current vs the behaviour policy in one update, k1, signed", "nats/token"),
    ("clipfrac", "token fraction where the clipped PPO term is active, either side", "fraction"),
    ("clipfrac_low", "lower-side clip fraction (A<0, ratio < 1-eps_low)", "fraction"),
    ("clipfrac_high", "upper-side clip fraction (A>0, ratio > 1+eps_high)", "fraction"),
    ("clipfrac_dual", "dual-clip fraction: A<0 and ratio > clip_ratio_c", "fraction"),
    ("entropy", "mean token entropy of the policy on the responses", "nats/token"),
    ("kl_loss", "KL to the reference used as an actor loss term", "nats/token"),
    ("reward_kl_penalty", "KL to the reference subtracted from the reward, k1", "nats/token"),
    (
        "reward_kl_coef",
        "beta of the in-reward KL used this step (controller output)",
        "coefficient",
    ),
    ("kl_ref_seq", "KL to the reference summed over the sequence (old TRL)", "nats/sequence"),
    ("kl_coef", "coefficient of the KL loss", "coefficient"),
    ("reward_mean", "raw task reward / score, batch mean (without KL penalty)", "reward"),
    ("reward_std", "reward spread within the batch", "reward"),
    ("frac_zero_std", "fraction of groups whose rewards are all equal", "fraction"),
    ("response_length", "mean response length", "tokens"),
    ("response_clip_ratio", "fraction of responses truncated at the max length", "fraction"),
    ("pg_loss", "policy loss", "loss"),
    ("grad_norm", "pre-clip gradient norm", "norm"),
    ("lr", "learning rate", "1/step"),
    ("step_time", "seconds per training step", "s"),
    ("cov_logp_adv", "Cov(token log-prob, advantage): entropy-decline probe", "nats"),
    ("rollout_kl", "KL of the inference engine's vs the trainer's log-probs (k3)", "nats/token"),
    (
        "rollout_logprob_diff",
        "mean |log-prob of the inference engine - log-prob of the trainer| per token",
        "nats/token",
    ),
    ("rollout_probs_corr", "Pearson correlation of engine and trainer token probs", "corr"),
    ("rollout_is_ess", "effective sample size of the rollout IS weights, over N", "fraction"),
    # The tail of the engine-trainer gap (docs/detectors.md, D9): the ratio is per token
    # pi_trainer / pi_engine of the sampled token, as TRL and verl define it.
    ("rollout_is_mean", "mean importance ratio trainer / engine (after any correction)", "ratio"),
    ("rollout_ratio_min", "smallest importance ratio trainer / engine in the batch", "ratio"),
    ("rollout_ratio_max", "largest importance ratio trainer / engine in the batch", "ratio"),
    ("rollout_ratio_p01", "1st percentile of the per-token ratio trainer / engine", "ratio"),
    ("rollout_ratio_p99", "99th percentile of the per-token ratio trainer / engine", "ratio"),
    (
        "rollout_tail_share",
        "share of tokens whose ratio trainer / engine lies outside a band (probe: [0.9, 1.1])",
        "fraction",
    ),
    (
        "rollout_logprob_diff_p99",
        "99th percentile of |log-prob of the engine - log-prob of the trainer| per token",
        "nats/token",
    ),
    (
        "rollout_logprob_diff_max",
        "largest |log-prob of the engine - log-prob of the trainer| of a token in the batch",
        "nats/token",
    ),
    ("rollout_probs_diff", "mean |prob of the engine - prob of the trainer| per token", "prob"),
    ("rollout_probs_diff_max", "largest |prob of the engine - prob of the trainer|", "prob"),
    ("sample_degenerate", "share of responses empty or malformed (from samples)", "fraction"),
    ("sample_repetition", "mean share of repeated word 4-grams in a response", "fraction"),
    (
        "rollout_staleness",
        "policy versions between the policy that generated a trained sample and the policy "
        "being updated, batch mean (0 = on-policy; async pipelines)",
        "versions",
    ),
    (
        "moe_max_vio",
        "MoE load violation of the busiest expert, (max load - mean load) / mean load, "
        "mean over layers",
        "ratio",
    ),
    (
        "moe_avg_vio",
        "MoE mean |load / mean load - 1| over the experts, mean over layers",
        "ratio",
    ),
    ("moe_routing_confidence", "router probability mass on the selected experts", "fraction"),
    (
        "moe_fallback_fraction",
        "share of token routes that router replay (R3) could not replay and routed afresh",
        "fraction",
    ),
)
SIGNALS: tuple[Signal, ...] = tuple(Signal(*row) for row in _SIGNAL_ROWS)

SIGNAL_NAMES: frozenset[str] = frozenset(signal.name for signal in SIGNALS)

# Raw key -> canonical signal, grouped by signal. When one step logs several keys of the same
# signal, the key listed first wins (see ALIAS_PRIORITY), so put the most specific key first.
# Each framework's keys were read from its source (the file named beside them); keys it logs
# with another definition or unit than the signal's are left out (docs/integrations/wandb.md).
# TRL through W&B: transformers' WandbCallback logs every key under `train/` (its
# rewrite_logs), so TRL's keys are listed a second time with that prefix.
_ALIASES_BY_SIGNAL: dict[str, tuple[str, ...]] = {
    "ppo_kl": (
        "actor/ppo_kl",  # verl
        "ppo_kl",  # OpenRLHF
        "train/ppo_kl",  # slime backends/megatron_utils/loss.py: old - new, as verl
        "actor/policykl",  # ROLL pipeline/rlvr/actor_worker.py: k1 of new - old (sign flipped)
        "actor/approxkl",  # ROLL (k2)
        # AReaL trainer/ppo/actor.py + utils/functional: new - old (sign flipped; D4 reads |x|)
        "ppo_actor/update/approx_kl/avg",
        "ppo/policy/approxkl",  # old TRL PPOTrainer
        "policy/approxkl_avg",  # TRL PPOTrainer (v0.12+)
    ),
    "clipfrac": (
        "actor/pg_clipfrac",  # verl
        "clip_ratio/region_mean",  # TRL GRPO
        "ppo_clip_ratio",  # OpenRLHF
        "train/pg_clipfrac",  # slime utils/ppo_utils.py
        "actor/clipfrac",  # ROLL pipeline/rlvr/actor_worker.py (the clipped term is the min)
        "ppo_actor/update/clip_ratio/avg",  # AReaL trainer/ppo/actor.py
        "train/clip_ratio/region_mean",  # TRL GRPO through W&B
        "policy/loss_metrics/clip_ratio",  # SkyRL backends/skyrl_train/utils/ppo_utils.py
        "ppo/policy/clipfrac",  # old TRL
        "policy/clipfrac_avg",  # TRL PPOTrainer (v0.12+)
    ),
    # ROLL pipeline/rlvr/actor_worker.py (its `@sum` suffix is dropped by utils/tracking.py)
    "clipfrac_low": (
        "clip_ratio/low_mean",
        "actor/ppo_ratio_low_clipfrac",
        "train/clip_ratio/low_mean",
    ),
    "clipfrac_high": (
        "clip_ratio/high_mean",
        "actor/ppo_ratio_high_clipfrac",
        "train/clip_ratio/high_mean",
    ),
    # verl's pg_clipfrac_lower is the dual-clip fraction, not the lower epsilon side.
    "clipfrac_dual": ("actor/pg_clipfrac_lower", "ppo_actor/update/dual_clip_ratio/avg"),
    "entropy": (
        "actor/entropy",  # verl
        "actor/entropy_loss",  # verl <= v0.3 and the new engine
        "entropy",  # TRL GRPO
        "entropy_loss",  # OpenRLHF
        "train/entropy_loss",  # slime backends/megatron_utils/loss.py (the entropy, not -H)
        "train/approx_entropy",  # NeMo-RL algorithms/loss/loss_functions.py
        "entropy/all/mean",  # prime-rl trainer/rl/train.py
        "ppo_actor/update/entropy/avg",  # AReaL trainer/ppo/actor.py
        "critic/entropy/mean",  # ROLL utils/metrics/metrics_manager.py
        "policy/policy_entropy",  # SkyRL backends/skyrl_train/workers/worker.py
        "ppo/policy/entropy",  # old TRL
        "train/entropy",  # TRL GRPO through W&B
    ),
    "kl_loss": (
        "actor/kl_loss",  # verl (and ROLL)
        "kl",  # TRL GRPO: k3
        "train/kl_loss",  # slime: k1 by default (--kl-loss-type), can be negative
        "train/kl_penalty",  # NeMo-RL loss_functions.py: k3 by default, before its coefficient
        "policy/policy_kl",  # SkyRL worker.py: k3 by default (kl_estimator_type)
        "train/kl",  # TRL GRPO through W&B
    ),
    "kl_coef": ("actor/kl_coef",),
    "reward_kl_penalty": (
        "actor/reward_kl_penalty",  # verl
        "critic/kl",  # verl <= v0.3, ROLL utils/functionals.py
        "loss/avg_kl",  # SkyRL train/trainer.py: k3 by default, not k1
    ),
    "reward_kl_coef": (
        "actor/reward_kl_penalty_coeff",  # verl
        "critic/kl_coeff",  # verl <= v0.3
        "critic/kl_coef",  # ROLL utils/functionals.py
        "loss/kl_loss_coef",  # SkyRL train/trainer.py
        "objective/kl_coef",  # TRL PPOTrainer
    ),
    "kl_ref_seq": ("objective/kl",),  # TRL PPOTrainer: per-sequence sum, target 6 nats
    "reward_mean": (
        "critic/score/mean",  # verl, ROLL (critic/rewards/mean includes the KL penalty)
        "reward",  # TRL
        "rollout/reward_mean",  # OpenRLHF
        "train/reward",  # NeMo-RL algorithms/grpo.py, TRL through W&B
        "rollout/raw_reward",  # slime ray/rollout.py (rollout/rewards is post-processed)
        "ppo_actor/task_reward/avg",  # AReaL trainer/ppo/actor.py
        "reward/avg_raw_reward",  # SkyRL train/trainer.py
        "ppo/mean_scores",  # old TRL
        "objective/scores",  # TRL PPOTrainer
    ),
    "reward_std": ("reward_std", "rollout/reward_std", "ppo/std_scores", "train/reward_std"),
    "frac_zero_std": ("frac_reward_zero_std", "train/frac_reward_zero_std"),
    "response_length": (
        "response_length/mean",  # verl
        "completions/mean_length",  # TRL
        "completion_length",  # TRL <= v0.16
        "response_length",  # OpenRLHF
        "rollout/response_length_mean",  # OpenRLHF
        "rollout/response_len/mean",  # slime observability/rollout_metrics.py
        "train/mean_gen_tokens_per_sample",  # NeMo-RL experience/rollouts.py
        "token/response_length/mean",  # ROLL utils/metrics/metrics_manager.py
        "generate/avg_num_tokens",  # SkyRL train/generators/utils.py
        # prime-rl orchestrator/metrics.py: an episode's output tokens (all its turns)
        "train/agg/effective/num_output_tokens/mean",
        "tokens/responses_len_mean",  # old TRL
        "train/completions/mean_length",  # TRL through W&B
    ),
    "response_clip_ratio": (
        "response_length/clip_ratio",
        "completions/clipped_ratio",
        "truncated",
        "rollout/truncated_rate",
        "rollout/truncated_ratio",  # slime observability/rollout_metrics.py
        "train/truncation_rate",  # NeMo-RL experience/rollouts.py
        "train/completions/clipped_ratio",  # TRL through W&B
        "samples/truncated_fraction",  # the hook, from the samples: when none of the above
    ),
    "pg_loss": (
        "actor/pg_loss",  # verl, ROLL
        "loss",
        "policy_loss",
        "train/pg_loss",  # slime
        "ppo_actor/update/actor_loss/avg",  # AReaL trainer/ppo/actor.py
        "policy/policy_loss",  # SkyRL worker.py
        "ppo/loss/policy",
        # TRL's loss through W&B; for NeMo-RL (grpo.py) the whole loss, KL term included:
        # pg_loss is read for non-finite values only (nonfinite.py), where that serves as well
        "train/loss",
    ),
    "grad_norm": (
        "actor/grad_norm",
        "grad_norm",
        "actor_grad_norm",
        "train/grad_norm",  # slime megatron_utils/model.py, NeMo-RL grpo.py, TRL via W&B
        "optim/grad_norm",  # prime-rl trainer/rl/train.py
        "ppo_actor/update/grad_norm",  # AReaL engine/fsdp_engine.py via actor.py
        "policy/grad_norm",  # SkyRL train/trainer.py
        "actor_train/grad_norm",  # ROLL distributed/strategy/fsdp2_strategy.py
    ),
    "lr": (
        "actor/lr",  # verl, ROLL pipeline/base_worker.py
        "learning_rate",
        "actor_lr",
        "train/lr-pg_0",  # slime model.py: the first parameter group's
        "train/lr",  # NeMo-RL grpo.py
        "optim/lr",  # prime-rl trainer/rl/train.py
        "ppo_actor/update/lr",  # AReaL engine/fsdp_engine.py via actor.py
        "policy/policy_lr",  # SkyRL worker.py
        "train/learning_rate",  # TRL through W&B
        "ppo/learning_rate",
    ),
    "step_time": (
        "timing_s/step",
        "step_time",
        "timing/step_total",
        "timing/train/total_step_time",  # NeMo-RL grpo.py (timer total_step_time)
        "time/step",  # prime-rl trainer/rl/train.py
        "time/step_total",  # ROLL pipeline/rlvr/rlvr_pipeline.py
        "timing/step",  # SkyRL train/trainer.py (Timer "step")
        "train/step_time",  # TRL through W&B
    ),
    "cov_logp_adv": ("probe/cov_logp_adv", "actor/entropy_cov", "cov_logp_adv"),
    # Train-inference mismatch (D9): verl's rollout_corr/ and training/ keys, slime's train/.
    "rollout_kl": (
        "rollout_corr/k3_kl",
        "rollout_corr/kl",
        "train/train_rollout_kl",
        "mismatch_kl/all/mean",  # prime-rl trainer/rl/loss.py: k3 of engine vs trainer
        "train/gen_kl_error",  # NeMo-RL loss_functions.py: KL(gen || train), k3 by default
    ),
    "rollout_logprob_diff": (
        "train/train_rollout_logprob_abs_diff",  # slime
        "rollout_corr/log_ppl_abs_diff",  # verl
        "policy/rollout_train_logprobs_abs_diff_mean",  # SkyRL train/trainer.py
        "sampling/sampling_logp_difference/mean",  # TRL GRPO with vLLM IS correction
        "probe/rollout_logprob_diff_mean",  # rlguard.probes.rollout_tail
    ),
    "rollout_probs_corr": ("training/rollout_actor_probs_pearson_corr",),
    "rollout_is_ess": ("rollout_corr/rollout_is_eff_sample_size",),
    # The tail. TRL (trl/trainer/grpo_trainer.py, snapshot f2cd5771) logs the ratio after its
    # truncation or masking (a masked one reads 0, the max stops at the cap, TRL#5231) and
    # |delta log p| before; verl (verl/trainer/ppo/rollout_corr_helper.py compute_is_metrics,
    # snapshot 1dda039b) the applied weights' min/max/mean.
    "rollout_is_mean": ("sampling/importance_sampling_ratio/mean", "rollout_corr/rollout_is_mean"),
    "rollout_ratio_min": ("sampling/importance_sampling_ratio/min", "rollout_corr/rollout_is_min"),
    "rollout_ratio_max": ("sampling/importance_sampling_ratio/max", "rollout_corr/rollout_is_max"),
    "rollout_ratio_p01": ("probe/rollout_ratio_p01",),
    "rollout_ratio_p99": ("probe/rollout_ratio_p99",),
    "rollout_tail_share": ("probe/rollout_ratio_outside_band",),
    "rollout_logprob_diff_p99": ("probe/rollout_logprob_diff_p99",),
    "rollout_logprob_diff_max": ("sampling/sampling_logp_difference/max",),
    # verl's training/rollout_probs_diff_* are |p_engine - p_trainer| in probability, despite
    # the name (verl/utils/debug/metrics.py); absent in bypass mode (verl PR 7196).
    "rollout_probs_diff": ("training/rollout_probs_diff_mean",),
    "rollout_probs_diff_max": ("training/rollout_probs_diff_max",),
    # What the hook reads from each step's samples (docs/detectors-samples.md)
    "sample_degenerate": ("samples/degenerate_fraction",),
    "sample_repetition": ("samples/repetition_rate",),
    # Async RL: how many policy versions old the trained samples are. The frameworks count the
    # lag from different ends, so their levels can differ by one version (docs/detectors.md).
    "rollout_staleness": (
        # verl v1 trainer (PR #6736, trainer_base.py): current version - 1 - the newest version
        # a trajectory used (0 = on-policy); `trajectory_staleness_worst` counts to the oldest
        # version, `trajectory_spans` the versions one trajectory used (neither is mapped).
        "training/off_policy/trajectory_staleness/mean",
        # NeMo-RL async GRPO/PPO (replay_buffer.py): current weight version - mean generation
        # version of the sampled trajectories; exactly 1 in a one-step-off run (PR #3410).
        "train/avg_trajectory_age",
        "avg_trajectory_age",
        # AReaL (trainer/ppo/actor.py): current version - the behaviour version of each
        # generated token, token mean (partial rollouts mix versions within a trajectory).
        "ppo_actor/update/version_stats/sample_staleness_theta_avg",
        # prime-rl orchestrator (utils.py episode_staleness): training step - 1 - the OLDEST
        # version that generated the rollout, queue time included (issue #2674).
        "off_policy/mean",
    ),
    # MoE routing health. Violation = how far an expert's token load is from the uniform share.
    "moe_max_vio": (
        # verl's VeOmni engine and VeOmni's trainer (ByteDance-Seed/VeOmni utils/moe_monitor.py,
        # MoERouterMonitor): per layer (max load - mean) / mean, then the mean over layers
        "moe/max_vio/avg",
        # verl rollout side (PR #6853, metric_utils.py): the same from the engine's routed experts
        "rollout/moe/max_vio/avg",
        # prime-rl (trainer/model.py get_load_balance_stats): per layer, mean over layers
        "max_vio/mean",
    ),
    "moe_avg_vio": ("moe/avg_vio/avg", "rollout/moe/avg_vio/avg"),  # VeOmni, verl: mean |dev|
    "moe_routing_confidence": (
        "routing_confidence/mean",  # prime-rl PR #2545: selected experts' probability mass
        "moe/routing_confidence",
    ),
    # NeMo-RL router replay (experience/rollouts.py): missing / expected token routes, ≈ 0;
    # "train/" when a training loop forwards the rollout metrics (docs/guides/router-replay.md)
    "moe_fallback_fraction": (
        "r3/routed_experts_fallback_token_route_fraction",
        "train/r3/routed_experts_fallback_token_route_fraction",
    ),
}

# The stability families: a family the run logged for a while that stops arriving is a WARN
# (signal_stopped), since the detectors that judge the run on it go blind; any other signal
# that stops is an INFO. Every rollout_* signal is the train-inference mismatch family.
STABILITY_FAMILIES: dict[str, tuple[str, ...]] = {
    "kl": (
        "ppo_kl",
        "kl_loss",
        "reward_kl_penalty",
        "kl_ref_seq",
        "kl_coef",
        "reward_kl_coef",
    ),
    "entropy": ("entropy", "cov_logp_adv"),
    "clipfrac": ("clipfrac", "clipfrac_low", "clipfrac_high", "clipfrac_dual"),
    "mismatch": tuple(
        sorted(n for n in SIGNAL_NAMES if n.startswith("rollout_") and n != "rollout_staleness")
    ),
    "reward": ("reward_mean", "reward_std", "frac_zero_std"),
    # async and MoE pipelines: NeMo-RL once dropped avg_trajectory_age silently (#3758)
    "staleness": ("rollout_staleness",),
    "moe": tuple(sorted(n for n in SIGNAL_NAMES if n.startswith("moe_"))),
}
FAMILY_OF: dict[str, str] = {
    name: family for family, names in STABILITY_FAMILIES.items() for name in names
}

ALIASES: dict[str, str] = {
    key: signal for signal, keys in _ALIASES_BY_SIGNAL.items() for key in keys
}

# Position of each key within its signal's list: lower wins when a step logs several.
ALIAS_PRIORITY: dict[str, int] = {
    key: position for keys in _ALIASES_BY_SIGNAL.values() for position, key in enumerate(keys)
}


def canonical_signal(key: str, aliases: Mapping[str, str | None] | None = None) -> str | None:
    """The canonical signal a raw metric key maps to, or None; user aliases win."""
    if aliases and key in aliases:
        return aliases[key] or None
    if key in ALIASES:
        return ALIASES[key]
    return key if key in SIGNAL_NAMES else None


def keys_by_signal(
    keys: Iterable[str], aliases: Mapping[str, str | None] | None = None
) -> dict[str, tuple[str, ...]]:
    """Canonical signal -> the raw keys among `keys` that map to it, best first: user aliases,
    then the alias table's order."""
    ranked: dict[str, list[tuple[int, str]]] = {}
    for key in keys:
        name = canonical_signal(key, aliases)
        if name is not None:
            rank = (
                -1 if aliases and key in aliases else ALIAS_PRIORITY.get(key, len(ALIAS_PRIORITY))
            )
            ranked.setdefault(name, []).append((rank, key))
    return {name: tuple(key for _, key in sorted(found)) for name, found in ranked.items()}


def validate_aliases(aliases: Mapping[str, object] | None) -> dict[str, str | None]:
    """Check a run's ``signal_aliases``; raise ValueError naming the bad entry."""
    checked: dict[str, str | None] = {}
    for key, signal in (aliases or {}).items():
        if signal is not None and signal not in SIGNAL_NAMES:
            raise ValueError(
                f"signal_aliases[{key!r}] = {signal!r} is not a canonical signal; "
                f"use one of {sorted(SIGNAL_NAMES)} or null to ignore the key"
            )
        checked[str(key)] = signal if isinstance(signal, str) else None
    return checked

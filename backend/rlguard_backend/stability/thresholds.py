"""Default thresholds (DETECTORS.md) and how server-wide and per-run overrides combine.

Overrides use the same shape as DEFAULTS, nested (``{"kl_runaway": {"level_warn": 0.6}}``) or
flat with a dot (``{"kl_runaway.level_warn": 0.6}``). Precedence: per run
(``run_config["rlguard_thresholds"]``) > server-wide > defaults. Unknown names raise ValueError.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Any

Thresholds = dict[str, float]

DEFAULTS: dict[str, Thresholds] = {
    "common": {
        "warmup_steps": 10,  # W = max(warmup_steps, warmup_fraction * planned steps)
        "warmup_fraction": 0.02,
        "update_interval_steps": 50,  # an open, still-firing alert re-emits this often
        "reward_trend_points": 30,
        "improving_t_stat": 2.0,
        "improving_rise": 0.02,  # x reward range
        "stagnant_gain": 0.1,  # x reward range
        "half_life_entropy": 3,
        "half_life_clipfrac": 3,
        "half_life_other": 5,  # reward, Z, KL, length, truncation, sample text
    },
    "rollout_mismatch": {
        # Growth against the run's own start: dense models sit at 1e-5..1e-3 (k3 KL of engine
        # vs trainer log-probs), MoE models at 1e-3..1e-1 (DETECTORS.md D9).
        "kl_growth": 10.0,
        "kl_floor": 1e-3,
        "kl_level_warn": 0.1,  # beyond MoE's normal range (verl's metric guide: < 0.1 healthy)
        "kl_level_critical": 0.5,  # verl's metric guide: > 0.5 a severe train-rollout gap
        "kl_growth_critical": 100.0,
        "kl_floor_critical": 1e-2,
        "logprob_diff_warn": 0.1,  # slime's CI gate on train_rollout_logprob_abs_diff
        "logprob_diff_critical": 0.5,
        "corr_critical": 0.9,  # a broken MoE kernel: 0.999 -> 0.37
        "ess_warn": 0.5,  # verl's metric guide: ESS/N > 0.5 healthy, < 0.2 degenerate
        "ess_critical": 0.2,
        # The tail (rollout_tail). Healthy BF16 engine vs trainer: 7.5 % of tokens outside
        # [0.9, 1.1], p95 |delta log p| 0.11, max 0.48 on 3,916 tokens, mean 0.0007 (TRL#6789);
        # top_p=0.8 against full-vocabulary trainer log-probs: 52 % outside (TRL PR 7269).
        "tail_growth": 3.0,  # x the run's own start (share outside the band, p99 |delta log p|)
        "share_floor": 0.15,
        "share_warn": 0.5,  # MoE-like k3 KL ~0.01-0.1 already puts a third or more outside
        "share_critical": 0.8,
        "width_floor": 0.3,  # p99 |delta log p|: past the PPO clip band (ln 1.2 = 0.18)
        "width_warn": 1.0,  # 1 % of tokens off by a factor e or more
        "width_critical": 2.5,
        "extreme_growth": 5.0,  # the batch's largest |delta log p| over its start
        "extreme_floor": 1.0,
        "is_mean_warn": 1.25,  # mean ratio outside [1/1.25, 1.25]; a sum-for-mean bug: 0.57
        "is_mean_critical": 2.0,  # outside [0.5, 2]: top_k=50 truncation bias reads 0.17
        "persistence": 3,
        "clear_steps": 10,
    },
    "staleness": {
        # Bound B on the smoothed staleness; L = the run's mean over settle_steps after warmup.
        "hint_margin": 1.0,  # B = max(K, L) + this with a designed max K (off-by-one counts)
        "growth": 2.0,  # without K: B = max(growth x L, L + margin)
        "margin": 2.0,  # versions: a one-step-off run (L = 1) warns past 3
        "critical_factor": 2.0,  # CRITICAL above this x B
        "settle_steps": 20,
        "persistence": 3,
        "clear_steps": 10,
    },
    "moe_routing": {
        # Violation (max_vio, else avg_vio) against L, its mean over settle_steps after warmup.
        "growth": 2.0,  # WARN at this x L ...
        "growth_floor": 0.25,  # ... and L + this
        "critical_growth": 3.0,  # CRITICAL at this x L ...
        "critical_floor": 1.0,  # ... and L + this
        "settle_steps": 20,
        "persistence": 5,
        "jump_factor": 3.0,  # a jump: a point at this x the median of the last jump_points ...
        "jump_floor": 0.5,  # ... and this above it
        "jump_points": 20,
        "jump_min_points": 10,
        "jump_persistence": 2,
        "fallback_warn": 0.01,  # R3 fallback share of token routes (NeMo-RL: "absent or rare")
        "fallback_critical": 0.1,
        "fallback_persistence": 3,
        "clear_steps": 10,
    },
    "signal_stopped": {
        "min_points": 10,  # points a signal must have arrived at: "logged for a while"
        "absent_points": 20,  # later steps that logged other keys while it stayed away
        "cadence_factor": 3.0,  # x the largest gap between its own points so far
        "clear_steps": 1,
    },
    "nonfinite": {
        "grad_window_steps": 10,
        "grad_critical_count": 2,
        "kl_loss_clamp": 9.9,  # verl k3 per-token clamp is 10
        "ppo_kl_clamp": 19.9,  # verl log-ratio clamp is 20
        "sequence_kl_negative": -1.0,  # old TRL warning threshold
        "clear_steps": 10,
    },
    "entropy_collapse": {
        "spent_ratio": 0.5,
        "collapse_ratio": 0.1,
        "identical_groups": 0.8,
        "short_length_ratio": 0.5,
        "solved_margin": 0.1,  # x reward range below r_max
        "persistence": 3,
        "clear_ratio": 0.6,
        "clear_steps": 10,
        "exhausted_entropy": 0.2,
        "exhausted_ratio": 0.25,
        "exhausted_window_points": 50,
        "exhausted_min_points": 30,
        "exhausted_t_stat": 2.0,
        "exhausted_persistence": 5,
        "exhausted_groups_warn": 0.5,
        "ceiling_min_gain": 0.1,  # x reward range
        "blowup_factor": 2.0,
        "blowup_margin": 1.0,
        "blowup_persistence": 5,
        # E4 slow rise: entropy 1.5x its start and still +15 % over 100 steps, reward not rising
        "rise_ratio": 1.5,
        "rise_gain": 0.15,
        "rise_window_steps": 100,
        "rise_persistence": 10,
    },
    "no_learning_signal": {
        "zero_grad_share": 0.3,
        "zero_grad_points": 10,
        "no_signal_groups": 0.9,
        "saturated_margin": 0.1,  # x reward range below r_max: saturation (INFO), not starvation
        "clear_steps": 10,
    },
    "entropy_cov_leading": {
        "window_points": 20,
        "positive_share": 0.8,
        "min_entropy_ratio": 0.5,
        "clear_share": 0.5,
        "clear_steps": 10,
    },
    "kl_runaway": {
        "floor": 0.05,
        "growth": 1.5,
        "lookback_steps": 50,
        "persistence": 5,
        "level_warn": 0.5,
        "level_critical": 1.0,
        # A run whose KL starts far from its reference (a teacher, a reset or resumed one) is
        # judged against its own start: the median of its first 5 KL points.
        "far_start": 0.1,  # a start at or above this is far (the initial policy starts near 0)
        "start_warn": 2.0,  # x its start: WARN (not below level_warn unless reference: teacher)
        "start_critical": 4.0,  # x its start: CRITICAL (not below level_critical)
        "reset_fraction": 0.2,  # KL below this x its smoothed value, twice: a reference reset
        "penalty_share_min": 0.01,
        "penalty_share_persistence": 10,
        "clear_growth": 1.2,
        "clear_steps": 20,
    },
    "kl_spike": {
        "default_ppo_kl_target": 0.01,
        "median_factor": 10,
        "budget_warn": 0.5,  # x kappa
        "budget_critical": 1.5,  # x kappa (SB3 / Spinning Up early stop)
        "history_points": 50,
        "min_history_points": 10,
        "grad_factor": 10,
        "grad_repeat": 3,  # spikes in history_points steps that make a grad spike WARN
        "on_policy_tolerance": 1e-3,
        "falling_clip_ratio": 0.5,
        "clear_steps": 10,
    },
    "kl_penalty": {
        "min_step": 30,
        "small_kl": 0.02,
        "unmoved_entropy_ratio": 0.8,
        "strong_share": 0.5,
        "persistence": 10,
        "binding_flatness": 0.1,
        "binding_lookback_steps": 20,
        "binding_persistence": 20,
        "clear_steps": 10,
    },
    "clipfrac": {
        "warn": 0.05,
        "baseline_factor": 10,
        "baseline_steps": 20,
        "warn_persistence": 5,
        "critical": 0.2,
        "critical_persistence": 3,
        "dual_clip": 1e-3,
        "dual_persistence": 5,
        "asymmetry_factor": 5,
        "asymmetry_floor": 0.01,
        "asymmetry_persistence": 5,
        "clear": 0.025,
        "clear_steps": 10,
    },
    "kl_controller": {
        "default_target": 0.1,
        "error_clip": 0.2,
        "warn_factor": 10,
        "critical_factor": 100,
        "replay_tolerance": 1e-3,
        "replay_persistence": 3,
        "units_delay_steps": 20,
        "units_points": 10,
        "units_high": 5,
        "units_low": 0.2,
    },
    "sample_quality": {  # docs/detectors-samples.md
        "rise": 0.1,  # above the run's own start (median of its first 5 points)
        "degenerate_warn": 0.2,
        "degenerate_critical": 0.5,
        "repetition_warn": 0.2,  # seq-rep-4: human text ~0.006, looping greedy text ~0.44
        "repetition_loops": 0.4,
        "entropy_rise": 1.5,  # below E4's blow-up limit (x2): the text says it first
        "length_rise": 1.5,  # below D8's blow-up factor (x2)
        "truncation": 0.1,
        "truncation_critical": 0.5,
        "persistence": 3,
        "clear_steps": 10,
    },
    "length": {
        "blowup_factor": 2.0,
        "truncation": 0.1,
        "truncation_rise": 0.05,
        "rise_lookback_steps": 20,
        "truncation_critical": 0.5,
        "collapse_factor": 0.3,
        "persistence": 5,
        "rise_factor": 1.5,  # entropy and length both above 1.5x start: INFO
        "truncation_at_floor": 0.99,
        "floor_margin": 0.02,  # x reward range above r_min counts as "at the floor"
        "clear_steps": 10,
    },
}


def resolve_thresholds(
    server: Mapping[str, Any] | None, per_run: Mapping[str, Any] | None
) -> dict[str, Thresholds]:
    """Defaults overlaid by server-wide, then per-run overrides."""
    resolved = {group: dict(values) for group, values in DEFAULTS.items()}
    for source, overrides in (("server thresholds", server), ("rlguard_thresholds", per_run)):
        for name, value in _flatten(overrides or {}).items():
            group, _, key = name.partition(".")
            if key not in resolved.get(group, {}):
                raise ValueError(f"{source}: {unknown_threshold(name)}")
            problem = value_problem(DEFAULTS[group][key], value)
            if problem:
                raise ValueError(f"{source}: threshold {name!r} = {value!r} {problem}")
            resolved[group][key] = int(value) if isinstance(DEFAULTS[group][key], int) else value
    return resolved


MAX_COUNT = 100_000  # steps or points a threshold counts: far past any window worth watching
MAX_LEVEL = 1e6  # the magnitude of a level, ratio or factor


def value_problem(default: float, value: Any) -> str:
    """Why ``value`` cannot stand in for a threshold whose default is ``default`` ("" if it
    can): a count (an int default) is a whole number from 1 to MAX_COUNT, anything else a finite
    number of the default's sign up to MAX_LEVEL. Zero counts, zero half-lives and huge windows
    would divide by zero, index nothing or allocate without end."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "must be a number"
    if isinstance(default, int):
        whole = isinstance(value, int) or value.is_integer()  # JSON's 30.0 is an integer
        if not whole or not 1 <= value <= MAX_COUNT:
            return f"counts steps or points: a whole number from 1 to {MAX_COUNT:,}"
        return ""
    if not math.isfinite(value) or value == 0 or (value > 0) != (default > 0):
        sign = "positive" if default > 0 else "negative"
        return f"must be a finite, {sign} number, like its default {default}"
    if abs(value) > MAX_LEVEL:
        return f"must be at most {MAX_LEVEL:g} in size"
    return ""


def overrides_schema() -> dict[str, Any]:
    """The JSON schema of a flat overrides map: each threshold by name, with its bounds."""
    properties: dict[str, Any] = {}
    for group, values in DEFAULTS.items():
        for key, default in values.items():
            if isinstance(default, int):
                bounds: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": MAX_COUNT}
            elif default > 0:
                bounds = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_LEVEL}
            else:
                bounds = {"type": "number", "exclusiveMaximum": 0, "minimum": -MAX_LEVEL}
            properties[f"{group}.{key}"] = bounds
    return {"type": "object", "properties": properties, "additionalProperties": False}


def check_flat_overrides(overrides: Mapping[str, Any]) -> None:
    """Refuse (ValueError) a flat overrides map with an unknown name or a value out of bounds."""
    for name, value in overrides.items():
        group, _, key = name.partition(".")
        if key not in DEFAULTS.get(group, {}):
            raise ValueError(unknown_threshold(name))
        problem = value_problem(DEFAULTS[group][key], value)
        if problem:
            raise ValueError(f"threshold {name!r} = {value!r} {problem}")


def unknown_threshold(name: str) -> str:
    """Why ``name`` is no threshold: the likeliest meant, then the names of its detector (or
    the detectors, when that is unknown too)."""
    names = [f"{group}.{key}" for group, keys in DEFAULTS.items() for key in keys]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    meant = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    group = name.partition(".")[0]
    if group in DEFAULTS:
        return f"unknown threshold {name!r}; {meant}{group}'s are {', '.join(DEFAULTS[group])}"
    return (
        f"unknown threshold {name!r}; {meant}a name is <detector>.<threshold>, the detectors "
        f"being {', '.join(DEFAULTS)} (docs/detectors.md lists each one's)"
    )


def _flatten(overrides: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in overrides.items():
        if isinstance(value, Mapping):
            flat.update({f"{name}.{key}": item for key, item in value.items()})
        else:
            flat[name] = value
    return flat

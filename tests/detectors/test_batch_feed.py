"""A suite rebuilt from its dumped state between batches, as the service rebuilds one from its
checkpoint: it gives the events, in order, and the state of one suite fed straight through.

Every case feeds one suite step by step and another batch by batch through feed_many, rebuilt
from its JSON-encoded dump_state() after every batch, and compares events, dump_state() and
missing() after every batch; the runs make rules fire and clear mid-batch, under faults and
various run configs. scripts/alert_fingerprint.py replays these runs.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from rlguard_backend.stability import DETECTOR_TYPES, AlertEvent, DetectorSuite

from .scenarios import SCENARIOS, Scenario, base_config, clip01, healthy, s8
from .test_rollout_mismatch import drifting

Run = list[tuple[int, dict[str, Any]]]
SEEDS = (0, 1, 2)


def split(run: Run, sizes: Sequence[int]) -> list[Run]:
    """Consecutive batches of the given sizes (cycled; a 0 is an empty batch) covering `run`."""
    assert any(size > 0 for size in sizes)
    batches, start, index = [], 0, 0
    while start < len(run):
        size = sizes[index % len(sizes)]
        batches.append(run[start : start + size])
        start, index = start + size, index + 1
    return batches


def random_sizes(seed: int, total: int, high: int = 150, empty_share: float = 0.0) -> list[int]:
    """Batch sizes drawn from 1..high (0 with probability empty_share) summing to >= total."""
    rng = random.Random(seed)
    sizes: list[int] = []
    while sum(sizes) < total:
        sizes.append(0 if rng.random() < empty_share else rng.randint(1, high))
    return sizes


def check_rebuilt(
    label: str,
    config: dict[str, Any],
    run: Run,
    sizes: Sequence[int],
    thresholds: dict[str, Any] | None = None,
) -> tuple[list[AlertEvent], DetectorSuite]:
    """Feed `run` step by step to one suite and in batches of `sizes` through feed_many to
    another, restored from its JSON-encoded state after every batch; after every batch both
    must have given the same events and dumped the same state.

    Returns all events and the batch-fed suite (the last one built).
    """
    stepwise = DetectorSuite(config, thresholds)
    batched = DetectorSuite(config, thresholds)
    events: list[AlertEvent] = []
    for index, batch in enumerate(split(run, sizes)):
        where = f"{label}, batch {index} ({len(batch)} entries"
        where += f", steps {batch[0][0]}..{batch[-1][0]})" if batch else ")"
        copies = [(step, dict(values)) for step, values in batch]
        want = [event for step, values in copies for event in stepwise.feed(step, values)]
        assert batched.feed_many(batch) == want, f"{where}: events differ"
        assert batch == copies, f"{where}: feed_many changed its input"
        have_text = json.dumps(batched.dump_state(), sort_keys=True)
        want_text = json.dumps(stepwise.dump_state(), sort_keys=True)
        assert have_text == want_text, f"{where}: dump_state differs"
        assert batched.missing() == stepwise.missing(), f"{where}: missing() differs"
        batched = DetectorSuite(config, thresholds, state=json.loads(have_text))
        events += want
    return events, batched


def kinds(events: list[AlertEvent]) -> Counter[tuple[str, str, str]]:
    return Counter((event.detector, event.key, event.action) for event in events)


def fired(events: list[AlertEvent]) -> set[tuple[str, str]]:
    return {(event.detector, event.key) for event in events}


# The §4 scenarios of scenarios.py.

BY_SEED = [(s, seed) for s in SCENARIOS for seed in SEEDS]


@pytest.mark.parametrize(
    ("scenario", "seed"), BY_SEED, ids=[f"{s.name}-seed{seed}" for s, seed in BY_SEED]
)
def test_scenarios_rebuilt_every_100_steps(scenario: Scenario, seed: int) -> None:
    events, _ = check_rebuilt(
        f"{scenario.name} seed {seed}", scenario.config, scenario.run(seed), [100]
    )
    assert events or not scenario.must_fire


# Faults injected at random steps, inside batches.

FAULTS = (
    "nan",
    "posinf",
    "neginf",
    "clamp",
    "outlier",
    "dropped_key",
    "key_sets",
    "key_order",
    "step_gap",
    "int_value",
    "bool_value",
    "string_value",
    "stale_step",
    "unknown_key",
    "empty_batch",
)
NON_FINITE = {"nan": math.nan, "posinf": math.inf, "neginf": -math.inf}
NON_FINITE_KEYS = ("actor/entropy", "actor/grad_norm", "actor/kl_loss", "critic/score/mean")


def _fault(kind: str, t: int, values: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """`values` with one fault of `kind` at training step t."""
    keys = list(values)
    if kind in NON_FINITE:
        values[rng.choice(NON_FINITE_KEYS)] = NON_FINITE[kind]
    elif kind == "clamp":  # D1's other rules: pinned at the k3 / log-ratio clamp, floor
        choice = rng.randrange(3)
        if choice == 0:
            values["actor/kl_loss"] = 9.95
        elif choice == 1:
            values["actor/ppo_kl"] = 19.95
        else:
            values["response_length/clip_ratio"], values["critic/score/mean"] = 1.0, 0.0
    elif kind == "outlier":  # finite, but far off: single-step rules fire (D4, D1, ...)
        key = rng.choice(keys)
        values[key] = values[key] * rng.choice((-3.0, 0.0, 30.0, 1e6)) + rng.random() * 0.5
    elif kind == "dropped_key":
        del values[rng.choice(keys)]
    elif kind == "key_sets":  # many different key sets (more than the suite caches)
        for key in rng.sample(keys, rng.randint(1, len(keys) - 2)):
            del values[key]
    elif kind == "key_order":
        rng.shuffle(keys)
        values = {key: values[key] for key in keys}
    elif kind == "int_value":
        if rng.random() < 0.5:
            values["actor/kl_coef"] = 1
        else:
            key = rng.choice(keys)
            values[key] = round(values[key])
    elif kind == "bool_value":
        values[rng.choice(keys)] = rng.random() < 0.5
    elif kind == "string_value":
        values[rng.choice(keys)] = rng.choice(["0.5", "nan", "", "n/a"])
    elif kind == "unknown_key":
        values["system/gpu0/util"] = 90.0 + t % 7
        if rng.random() < 0.3:
            values["custom/anything"] = math.nan
    return values


def collapsing(t: int, values: dict[str, Any], rng: random.Random, steps: int) -> dict[str, Any]:
    """A healthy step's values changed: entropy collapsed with identical groups at 150..399,
    recovered from 400 on (with rising reward)."""
    if 150 <= t < 400:
        values["actor/entropy"] = 0.03 + 0.005 * rng.gauss(0, 1)
        values["frac_reward_zero_std"] = clip01(0.9 + 0.02 * rng.gauss(0, 1))
        values["critic/score/mean"] = 0.5 + 0.03 * rng.gauss(0, 1)
    elif t >= 400:
        values["actor/entropy"] = 0.5 + 0.01 * rng.gauss(0, 1)
        values["critic/score/mean"] = 0.5 + 0.6 * (t - 400) / steps + 0.03 * rng.gauss(0, 1)
    return values


def fuzzed_run(kind: str, seed: int, steps: int = 500, base: str = "healthy") -> Run:
    """A run with faults of `kind` (or of every kind, "mixed") in bursts at random steps.

    base "healthy": scenarios.healthy(); "collapse": collapse_and_recover(), whose alerts open,
    update and clear around the faults.
    """
    rng = random.Random(seed)
    run: Run = []
    step, burst, burst_kind = -1, 0, kind
    for t in range(steps):
        values: dict[str, Any] = healthy(t, rng)
        if base == "collapse":
            values = collapsing(t, values, rng, steps)
        if burst == 0 and rng.random() < (0.02 if kind == "mixed" else 0.03):
            burst = rng.choice((1, 1, 1, 2, 3, 12))
            burst_kind = rng.choice(FAULTS) if kind == "mixed" else kind
        faulty, burst = burst > 0, max(0, burst - 1)
        step += rng.randint(2, 60) if faulty and burst_kind == "step_gap" else 1
        if faulty:
            values = _fault(burst_kind, t, values, rng)
        run.append((step, values))
        if faulty and burst_kind == "stale_step":  # a repeat or an older step: ignored
            stale = {key: math.nan for key in values}
            run.append((step - rng.randint(0, min(step, 5)), stale))
    return run


BY_FAULT = [
    (kind, seed, base)
    for kind in FAULTS
    for seed, base in ((10, "healthy"), (11, "healthy"), (12, "collapse"), (13, "collapse"))
]


@pytest.mark.parametrize(
    ("kind", "seed", "base"),
    BY_FAULT,
    ids=[f"{kind}-seed{seed}-{base}" for kind, seed, base in BY_FAULT],
)
def test_faults_injected_inside_batches(kind: str, seed: int, base: str) -> None:
    run = fuzzed_run(kind, seed, base=base)
    empty_share = 0.3 if kind == "empty_batch" else 0.0
    sizes = random_sizes(seed, len(run), high=80, empty_share=empty_share)
    label = f"fault {kind} on {base} run seed {seed} sizes {sizes}"
    events, _ = check_rebuilt(label, base_config(500), run, sizes)
    if kind in (*NON_FINITE, "clamp"):
        assert any(event.detector == "nonfinite" for event in events)
    if kind == "outlier":
        assert any(event.detector != "entropy_collapse" for event in events)
    if base == "collapse":
        assert any(event.detector == "entropy_collapse" for event in events)


@pytest.mark.parametrize("seed", range(20, 26))
def test_mixed_faults_inside_batches(seed: int) -> None:
    run = fuzzed_run("mixed", seed, steps=1500)
    sizes = random_sizes(seed, len(run), empty_share=0.05)
    events, _ = check_rebuilt(
        f"mixed faults seed {seed} sizes {sizes}", base_config(1500), run, sizes
    )
    assert events


# Runs built to make rules fire mid-batch and clear again, under various run configs.


def collapse_and_recover(seed: int, steps: int = 700, scale: tuple[float, float] = (0, 1)) -> Run:
    """Healthy until 150, entropy collapsed until 400, then recovered; rewards mapped from
    [0, 1] onto [scale[0], scale[1]]."""
    rng, run = random.Random(seed), []
    low, high = scale
    for t in range(steps):
        values = collapsing(t, healthy(t, rng), rng, steps)
        values["critic/score/mean"] = low + (high - low) * values["critic/score/mean"]
        run.append((t, values))
    return run


@pytest.mark.parametrize("sizing", ["100", "37", "random"])
def test_entropy_collapse_opens_updates_and_clears_mid_batch(sizing: str) -> None:
    seed = 30
    sizes = random_sizes(seed, 700) if sizing == "random" else [int(sizing)]
    events, _ = check_rebuilt(
        f"collapse and recover seed {seed} sizes {sizes}",
        base_config(700),
        collapse_and_recover(seed),
        sizes,
    )
    found = kinds(events)
    for action in ("open", "update", "resolve"):
        assert found[("entropy_collapse", "entropy_collapse", action)], (action, found)


def spikes_on_policy(seed: int, steps: int = 400) -> Run:
    """U == 1: ppo_kl must be 0, yet it is 0.01 at 100..103 and 200..319."""
    rng, run = random.Random(seed), []
    for t in range(steps):
        values = healthy(t, rng)
        if 100 <= t < 104 or 200 <= t < 320:
            values["actor/ppo_kl"] = 0.01 * math.exp(0.1 * rng.gauss(0, 1))
        run.append((t, values))
    return run


def test_one_update_per_batch() -> None:
    """clip_inactive opens at the first step and stays open; logprob_mismatch opens, updates,
    clears."""
    seed = 31
    sizes = random_sizes(seed, 400)
    config = base_config(400, updates_per_batch=1)
    events, suite = check_rebuilt(
        f"U=1 seed {seed} sizes {sizes}", config, spikes_on_policy(seed), sizes
    )
    found = kinds(events)
    assert found[("clipfrac", "clip_inactive", "open")] == 1
    assert not found[("clipfrac", "clip_inactive", "resolve")]
    for action in ("open", "update", "resolve"):
        assert found[("kl_spike", "logprob_mismatch", action)], (action, found)
    assert "clipfrac|clip_inactive" in suite.dump_state()["alerts"]


def reward_kl_run(seed: int, steps: int = 500) -> Run:
    """In-reward KL with its coefficient and the reward spread logged: the penalty is negligible
    until 200 (kl_penalty_ineffective), then dominant while reward stagnates (D5)."""
    rng, run = random.Random(seed), []
    for t in range(steps):
        values = healthy(t, rng)
        del values["actor/kl_loss"], values["actor/kl_coef"]
        values["actor/reward_kl_penalty"] = 0.05 * math.exp(0.05 * rng.gauss(0, 1))
        values["actor/reward_kl_penalty_coeff"] = 1e-4 if t < 200 else 0.02
        values["reward_std"] = 0.3 + 0.01 * rng.gauss(0, 1)
        if t >= 200:
            values["critic/score/mean"] = 0.25 + 0.03 * rng.gauss(0, 1)
        run.append((t, values))
    return run


@pytest.mark.parametrize("controller", ["fixed", "adaptive"])
def test_reward_kl_placement(controller: str) -> None:
    seed = 32
    config = base_config(
        500,
        kl_placement="reward",
        kl_estimator="k1",
        kl_controller=controller,
        kl_target=0.1,
        kl_horizon=10000,
        sequences_per_step=1024,
    )
    sizes = random_sizes(seed, 500)
    events, _ = check_rebuilt(
        f"in-reward KL ({controller}) seed {seed} sizes {sizes}", config, reward_kl_run(seed), sizes
    )
    assert {("kl_runaway", "kl_penalty_ineffective"), ("kl_penalty", "kl_penalty_strong")} <= fired(
        events
    )


REWARD_CONFIGS = {
    "bounds": base_config(700, reward_min=-5.0, reward_max=20.0),
    "no-bounds": {k: v for k, v in base_config(700).items() if not k.startswith("reward_")},
    "wrong-bounds": base_config(700),
}


@pytest.mark.parametrize("name", list(REWARD_CONFIGS))
def test_rewards_outside_unit_interval(name: str) -> None:
    seed = 33
    run = collapse_and_recover(seed, scale=(-5.0, 20.0))
    sizes = random_sizes(seed, len(run))
    events, _ = check_rebuilt(
        f"rewards in [-5, 20], {name} seed {seed}", REWARD_CONFIGS[name], run, sizes
    )
    assert events


def test_long_warmup_only_non_finite_and_degenerate_batch_rules_fire() -> None:
    """In warmup only D1 and the hard limits fire: S8's NaNs, and its all-truncated batch
    with the reward at its floor (D8's truncated_at_floor)."""
    seed = 34
    run = s8(random.Random(seed), 400)
    config = base_config(400, planned_steps=1_000_000)
    events, _ = check_rebuilt(f"S8 with planned_steps 1e6 seed {seed}", config, run, [100, 37])
    fired = {(event.detector, event.key) for event in events}
    assert fired == {("nonfinite", "nonfinite"), ("length", "truncated_at_floor")}


THRESHOLD_CASES = {
    "per-run": ({"entropy_collapse": {"persistence": 1}, "common.update_interval_steps": 7}, None),
    "server": ({}, {"entropy_collapse.persistence": 1, "common": {"update_interval_steps": 13}}),
    "both": (
        {"entropy_collapse": {"clear_steps": 3}, "length": {"persistence": 2}},
        {"entropy_collapse.clear_steps": 30, "kl_spike": {"grad_factor": 2.0}},
    ),
}


@pytest.mark.parametrize("name", list(THRESHOLD_CASES))
def test_threshold_overrides(name: str) -> None:
    per_run, server = THRESHOLD_CASES[name]
    config = base_config(700, rlguard_thresholds=per_run)
    seed = 35
    sizes = random_sizes(seed, 700)
    events, _ = check_rebuilt(
        f"thresholds {name} seed {seed} sizes {sizes}",
        config,
        collapse_and_recover(seed),
        sizes,
        thresholds=server,
    )
    assert ("entropy_collapse", "entropy_collapse", "update") in kinds(events)


def probes_run(seed: int, steps: int = 500) -> Run:
    """The covariance probe and the upper / lower / dual clip fractions, each firing a while.

    cov_logp_adv positive until 200 (entropy_cov_leading), then negative; upper clipping 5x the
    lower at 100..159 (clip_asymmetry); dual clip at 250..289 (dual_clip). Some steps log a
    second key for a signal, or the preferred key with a value that is no number.
    """
    rng, run = random.Random(seed), []
    for t in range(steps):
        values: dict[str, Any] = healthy(t, rng)
        values["probe/cov_logp_adv"] = (0.05 if t < 200 else -0.05) + 0.02 * rng.gauss(0, 1)
        lopsided = 100 <= t < 160
        values["actor/ppo_ratio_high_clipfrac"] = 0.05 if lopsided else 0.003
        values["actor/ppo_ratio_low_clipfrac"] = 0.002 if lopsided else 0.003
        values["actor/pg_clipfrac_lower"] = 0.01 if 250 <= t < 290 else 0.0
        if t % 13 == 0:
            values["clip_ratio/high_mean"] = "n/a"  # preferred key, no number: the other wins
        if t % 17 == 0:
            values["clip_ratio/region_mean"] = values["actor/pg_clipfrac"] * 1.1
            values["actor/entropy_cov"] = values["probe/cov_logp_adv"]
        run.append((t, values))
    return run


@pytest.mark.parametrize("sizing", ["100", "random"])
def test_covariance_probe_and_clip_sides(sizing: str) -> None:
    seed = 36
    sizes = random_sizes(seed, 500) if sizing == "random" else [100]
    config = base_config(500, clip_ratio=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    events, _ = check_rebuilt(f"probes seed {seed} sizes {sizes}", config, probes_run(seed), sizes)
    found = kinds(events)
    for key in ("entropy_cov_leading", "clip_asymmetry", "dual_clip"):
        detector = "entropy_cov_leading" if key == "entropy_cov_leading" else "clipfrac"
        assert found[(detector, key, "open")] and found[(detector, key, "resolve")], (key, found)


def test_cases_exercise_every_detector() -> None:
    """The runs above make every detector speak, so equal events are not vacuous."""
    runs = [(s.config, s.run(0)) for s in SCENARIOS]
    runs += [(base_config(500), probes_run(36)), (base_config(700), collapse_and_recover(30))]
    rng = random.Random(0)
    runs.append(
        (base_config(300), [(t, {**healthy(t, rng), **drifting(t, rng)}) for t in range(300)])
    )
    runs.append((QUIET_CONFIG, changed_run("degenerate_responses")))
    detectors = set()
    for config, run in runs:
        suite = DetectorSuite(config)
        detectors |= {event.detector for step, values in run for event in suite.feed(step, values)}
    assert detectors == {kind.id for kind in DETECTOR_TYPES}


# Each rule firing, and clearing, in the middle of batches of an otherwise quiet run.

QUIET_CONFIG = {
    "updates_per_batch": 4,
    "kl_placement": "loss",
    "kl_coef": 0.001,
    "ppo_kl_target": 0.01,
    "reward_min": 0.0,
    "reward_max": 1.0,
}
CHANGE_AT, CHANGE_UNTIL, STEPS = 260, 420, 700


def quiet_step(t: int) -> dict[str, float]:
    """A run in which nothing happens: every signal the detectors read, with a small wobble."""
    wobble = math.sin(t * 0.7)
    return {
        "actor/entropy": 0.6 + 0.004 * wobble,
        "actor/ppo_kl": 1e-4 * (1.5 + wobble),
        "actor/pg_clipfrac": 0.002 * (1.5 + wobble),
        "actor/pg_clipfrac_lower": 0.0,
        "actor/kl_loss": 0.004 + 2e-4 * wobble,
        "actor/kl_coef": 0.001,
        "actor/grad_norm": 0.5 + 0.05 * wobble,
        "actor/pg_loss": 0.01 * wobble,
        "critic/score/mean": 0.3 + 0.6 * t / STEPS + 0.01 * wobble,  # improving
        "frac_reward_zero_std": 0.2 + 0.01 * wobble,
        "response_length/mean": 300 + 3 * wobble,
        "response_length/clip_ratio": 0.01 + 0.001 * wobble,
        "samples/degenerate_fraction": 0.01 + 0.002 * wobble,
        "samples/repetition_rate": 0.03 + 0.002 * wobble,
        "system/gpu0/util": 90 + wobble,
    }


def _flat_reward(t: int) -> float:
    """A reward back at its start and flat: stagnant (several rules need it)."""
    return 0.3 + 0.01 * math.sin(t * 0.7)


def _plateau_reward(t: int) -> float:
    """The quiet run's reward frozen at its CHANGE_AT level: gained, then flat."""
    return 0.3 + 0.6 * CHANGE_AT / STEPS + 0.01 * math.sin(t * 0.7)


def _ramp(t: int) -> float:
    """0 before CHANGE_AT, rising to 1 over 20 steps, 1 until CHANGE_UNTIL, then 0 again."""
    return 0.0 if t >= CHANGE_UNTIL else clip01((t - CHANGE_AT) / 20)


CHANGES: dict[str, tuple[str, Any]] = {
    # rule -> (the alert it raises, how a step changes while it holds)
    "degenerate_responses": (
        "degenerate_responses",
        lambda t, v, r: v.update({"samples/degenerate_fraction": 0.01 + 0.6 * r}),
    ),
    "repetition_loops": (
        "repetition_loops",
        lambda t, v, r: v.update({"samples/repetition_rate": 0.03 + 0.6 * r}),
    ),
    "entropy_gibberish": (
        "entropy_gibberish",
        lambda t, v, r: v.update(
            {"actor/entropy": 0.6 * (1 + 0.8 * r), "samples/degenerate_fraction": 0.01 + 0.3 * r}
        ),
    ),
    "kl_binding": (
        "kl_binding",
        lambda t, v, r: v.update(
            {"actor/kl_loss": 0.004 + 0.03 * r, "critic/score/mean": _flat_reward(t)}
        ),
    ),
    "kl_growth": (
        "kl_runaway",
        lambda t, v, r: v.update(
            {
                "actor/kl_loss": 0.004 + r * 0.03 * math.exp((t - 260) / 40),
                "critic/score/mean": _flat_reward(t),
            }
        ),
    ),
    "length_blowup": (
        "length_blowup",
        lambda t, v, r: v.update(
            {
                "response_length/mean": 300 + 450 * r,
                "response_length/clip_ratio": 0.01 + r * min(0.6, 0.01 * max(0, t - 270)),
                "critic/score/mean": _flat_reward(t),
            }
        ),
    ),
    "length_collapse": (
        "length_collapse",
        lambda t, v, r: v.update({"response_length/mean": 300 - 240 * r}),
    ),
    "entropy_blowup": (
        "entropy_blowup",
        lambda t, v, r: v.update({"actor/entropy": 0.6 + 1.6 * r}),
    ),
    "entropy_length_rise": (
        "entropy_length_rise",
        lambda t, v, r: v.update(
            {"actor/entropy": 0.6 + 0.4 * r, "response_length/mean": 300 + 200 * r}
        ),
    ),
    "entropy_collapse": (
        "entropy_collapse",
        lambda t, v, r: v.update(
            {"actor/entropy": 0.6 - 0.55 * r, "critic/score/mean": _flat_reward(t)}
        ),
    ),
    # Entropy spent, reward risen and then flat: not a collapse (the reward was bought).
    "entropy_exhausted": (
        "entropy_exhausted",
        lambda t, v, r: v.update(
            {"actor/entropy": 0.6 - 0.55 * r, "critic/score/mean": _plateau_reward(t)}
        ),
    ),
    "entropy_exhausted_warn": (  # half the groups all-equal: WARN rather than INFO
        "entropy_exhausted",
        lambda t, v, r: v.update(
            {
                "actor/entropy": 0.6 - 0.55 * r,
                "critic/score/mean": _plateau_reward(t),
                "frac_reward_zero_std": 0.2 + 0.45 * r,
            }
        ),
    ),
    "clip_saturation": (
        "clipfrac",
        lambda t, v, r: v.update({"actor/pg_clipfrac": 0.002 + 0.25 * r}),
    ),
    "clip_warn": (  # past the WARN level, short of CRITICAL
        "clipfrac",
        lambda t, v, r: v.update({"actor/pg_clipfrac": 0.002 + 0.1 * r}),
    ),
    "no_learning_signal": (
        "no_learning_signal",
        lambda t, v, r: v.update({"actor/grad_norm": 0.0 if r > 0.5 else v["actor/grad_norm"]}),
    ),
    "grad_spike": (
        "grad_spike",
        lambda t, v, r: v.update({"actor/grad_norm": 30.0 if t in (300, 333) else 0.5}),
    ),
    "kl_spike": (
        "kl_spike",
        lambda t, v, r: v.update({"actor/ppo_kl": 0.05 if t in (301, 377) else 1e-4}),
    ),
    "pinned": ("pinned_at_clamp", lambda t, v, r: v.update({"actor/kl_loss": 10.0 * (r == 1)})),
}


def changed_run(rule: str) -> Run:
    change = CHANGES[rule][1]
    run = []
    for t in range(STEPS):
        values = quiet_step(t)
        if CHANGE_AT <= t < CHANGE_UNTIL + 60:
            change(t, values, _ramp(t))
        run.append((t, values))
    return run


def test_the_quiet_run_says_nothing() -> None:
    events, _ = check_rebuilt("quiet", QUIET_CONFIG, changed_run("kl_binding")[:250], [100])
    assert events == []


@pytest.mark.parametrize("rule", sorted(CHANGES))
def test_a_rule_firing_and_clearing_inside_batches(rule: str) -> None:
    key = CHANGES[rule][0]
    # A clamped KL loss is also past kl_runaway's levels, which would speak first.
    thresholds = {"kl_runaway.level_warn": 50, "kl_runaway.level_critical": 100}
    events, _ = check_rebuilt(
        rule, QUIET_CONFIG, changed_run(rule), [37], thresholds if rule == "pinned" else None
    )
    actions = {event.action for event in events if event.key == key}
    assert "open" in actions, (key, kinds(events))


def test_a_high_but_steady_kl_is_no_runaway() -> None:
    """KL above the growth rule's floor, accelerating, reward flat, but growing far less than
    x1.5 in 50 steps: only the growth test keeps the rule silent."""
    run = [
        (t, {**values, "actor/kl_loss": 0.1 + 1e-8 * t * t, "critic/score/mean": _flat_reward(t)})
        for t, values in changed_run("kl_binding")
    ]
    events, _ = check_rebuilt("steady KL", QUIET_CONFIG, run, [100])
    assert not [event for event in events if event.detector == "kl_runaway"]


@pytest.mark.parametrize("reward", ["improving", "plateau"])
def test_low_entropy_runs_raise_entropy_exhausted_only_on_a_plateau(reward: str) -> None:
    """Entropy below E3's 0.2 nats from the start, as in many good runs: the reward trend
    decides E3 on every step; a plateau opens it and updates it."""
    run = [
        (
            t,
            {
                **values,
                "actor/entropy": 0.12 + 0.004 * math.sin(t * 0.7),
                **({"critic/score/mean": _plateau_reward(t)} if reward == "plateau" else {}),
            },
        )
        for t, values in changed_run("kl_binding")[:CHANGE_AT]
    ]
    events, _ = check_rebuilt(f"low entropy, {reward}", QUIET_CONFIG, run, [37])
    exhausted = {event.action for event in events if event.key == "entropy_exhausted"}
    assert exhausted == ({"open", "update"} if reward == "plateau" else set()), kinds(events)


def test_a_reward_step_after_a_gap_in_the_steps_is_fitted_at_its_step() -> None:
    """Trend windows across a gap in the step numbers: the fit spaces their points by step,
    so one new reward after a long gap is a steep rise (improving) that the same values one
    step apart would not be. The gap comes at a batch's last step: every other window of
    the batch is flat. The reward's rise clears the penalty alert raised while it was flat."""
    run = []
    for t, values in changed_run("kl_binding")[:300]:
        step = t if t < 199 else t + 500
        run.append((step, {**values, "critic/score/mean": 0.3 if t < 199 else 0.36}))
    events, _ = check_rebuilt("a reward jump after a 500-step gap", QUIET_CONFIG, run, [100])
    resolved = [e.last_step for e in events if e.action == "resolve"]
    assert resolved == [699 + 9]  # ten improving points from the jump at step 699

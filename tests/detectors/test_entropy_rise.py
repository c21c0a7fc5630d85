"""E4's slow rise (DETECTORS.md, "E4 slow rise"): entropy climbing for hundreds of steps with
no reward is caught before it doubles; a DAPO clip-higher run's small rise with reward is not."""

from __future__ import annotations

import random

from rlguard_backend.stability import DetectorSuite
from tests.detectors.scenarios import base_config, healthy

SEEDS = range(20)


def events(steps: int, entropy, reward, seed: int) -> list:  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    suite = DetectorSuite(base_config(steps))
    found = []
    for t in range(steps):
        values = healthy(t, rng)
        values["actor/entropy"] = entropy(t) + 0.01 * rng.gauss(0, 1)
        values["critic/score/mean"] = reward(t) + 0.03 * rng.gauss(0, 1)
        found += suite.feed(t, values)
    return [e for e in found if e.detector == "entropy_collapse"]


def test_entropy_slow_rise_without_reward_warns_long_before_a_blowup() -> None:
    for seed in SEEDS:
        # 0.4 -> 1.0 nats over 400 steps (2.5x, never past the blow-up limit of 1.4), reward flat
        found = events(400, lambda t: 0.4 * (1 + 1.5 * t / 400), lambda t: 0.3, seed)
        rising = [e for e in found if e.key == "entropy_rising" and e.action == "open"]
        assert rising and 133 <= rising[0].last_step <= 175, (seed, rising[:1])
        assert rising[0].severity == "warn" and "keeps climbing" in rising[0].message
        assert not [e for e in found if e.key == "entropy_blowup"]


def test_entropy_small_rise_with_reward_rising_is_silent() -> None:
    for seed in SEEDS:
        # DAPO clip-higher: 0.30 -> 0.45 nats while reward climbs 0.2 -> 0.7
        found = events(300, lambda t: 0.30 + 0.15 * t / 300, lambda t: 0.2 + 0.5 * t / 300, seed)
        assert [e for e in found if e.severity != "info"] == [], seed

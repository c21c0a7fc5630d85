"""Train demo preset variants on several seeds and print the alerts the detectors raise.

For tuning a preset against tests/demo/test_demo_alerts.py: each variant is a preset name with
field overrides, trained for real (two processes at a time) and fed to DetectorSuite step by step.

    .venv/bin/python scripts/sweep_presets.py --seeds 0-9 healthy healthy:lr=2e-3,kl_coef=1.5

Per seed it prints the reward, KL to the reference and entropy (means of steps 1-10, 96-105 and
the last 10) and the first step of each WARN or CRITICAL alert, as key:severity@step.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from rlguard.demo import TrainResult
from rlguard.demo.parallel import train_parallel
from rlguard.demo.presets import PresetConfig, resolve
from rlguard_backend.stability import DetectorSuite

LOUD = ("warn", "critical")
SUMMARY_KEYS = {"R": "critic/score/mean", "KL": "probe/kl_to_ref", "H": "actor/entropy"}


def parse_variant(spec: str) -> PresetConfig:
    """``name`` or ``name:field=value,field=value``: a preset with its fields overridden."""
    name, _, assignments = spec.partition(":")
    base = resolve(name)
    overrides: dict[str, Any] = {}
    for assignment in filter(None, assignments.split(",")):
        field, _, value = assignment.partition("=")
        kind = type(getattr(base, field))
        overrides[field] = kind(float(value)) if kind in (int, float) else kind(value)
    return dataclasses.replace(base, name=spec, **overrides)


def parse_seeds(text: str) -> list[int]:
    """``0-4`` or ``0,3,7``."""
    if "-" in text:
        first, last = text.split("-")
        return list(range(int(first), int(last) + 1))
    return [int(seed) for seed in text.split(",")]


def first_alerts(config: PresetConfig, result: TrainResult, steps: int) -> dict[str, int]:
    """``key:severity`` -> the step it first opened or escalated at."""
    suite = DetectorSuite(config.run_config(planned_steps=steps))
    first: dict[str, int] = {}
    for step, metrics in enumerate(result.history, start=1):
        for event in suite.feed(step, metrics):
            if event.severity in LOUD and event.action != "resolve":
                first.setdefault(f"{event.key}:{event.severity}", step)
    return first


def summary(result: TrainResult) -> str:
    """One line per run: each summary key's mean at the start, the middle and the end."""
    parts = []
    for label, key in SUMMARY_KEYS.items():
        values = result.series(key)
        spans = (values[:10], values[95:105], values[-10:])
        parts.append(f"{label} " + " ".join(f"{sum(s) / len(s):.3f}" for s in spans if s))
    return " | ".join(parts)


def main() -> None:
    """Train each preset variant on every seed and print each run's summary line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="+", help="preset[:field=value,...]")
    parser.add_argument("--seeds", default="0-4")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    configs = {spec: parse_variant(spec) for spec in args.variants}
    lines: dict[str, list[str]] = {spec: [] for spec in configs}
    for seed in parse_seeds(args.seeds):
        results = train_parallel(list(configs.values()), args.steps, seed=seed, workers=2)
        for spec, config in configs.items():
            alerts = first_alerts(config, results[spec], args.steps)
            found = " ".join(f"{key}@{step}" for key, step in alerts.items()) or "quiet"
            lines[spec].append(f"  seed {seed}: {summary(results[spec])} | {found}")
    for spec, seed_lines in lines.items():
        print(f"== {spec}", *seed_lines, sep="\n")


if __name__ == "__main__":
    main()

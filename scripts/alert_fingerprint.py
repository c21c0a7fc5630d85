"""Every alert event the detectors raise on a fixed set of runs, written to one JSON file.

A refactor of ``rlguard_backend.stability`` that must not change alerts is checked by writing
the file on the old code and on the new, then comparing the two (``--compare``)::

    python scripts/alert_fingerprint.py --demo-cache /tmp/demo.json -o before.json   # old code
    python scripts/alert_fingerprint.py --demo-cache /tmp/demo.json -o after.json    # new code
    python scripts/alert_fingerprint.py --compare before.json after.json

The runs: the §4 scenario suite (tests/detectors/scenarios.py) on several seeds, the batch-feed
cases of tests/detectors/test_batch_feed.py (faults, rule changes, probes, reward bounds,
threshold overrides; some fed through a suite rebuilt from its dumped state every 37 steps),
the rollout-mismatch cases and the demo presets (trained once on CPU; ``--demo-cache`` keeps
their metrics, which do not depend on the detectors, so later runs skip the training).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlguard_backend.stability import AlertEvent, DetectorSuite

Run = list[tuple[int, dict[str, Any]]]
Case = tuple[str, dict[str, Any], Run, dict[str, Any] | None, bool]
SCENARIO_SEEDS = range(5)
DEMO_SEEDS, DEMO_STEPS = range(3), 200
REBUILD_EVERY = 37


def fingerprint(event: AlertEvent) -> dict[str, Any]:
    """The fields of one event that a user sees."""
    return {
        "detector": event.detector,
        "key": event.key,
        "action": event.action,
        "severity": event.severity,
        "first_step": event.first_step,
        "last_step": event.last_step,
        "message": event.message,
        "evidence": event.evidence,
        "advice": event.advice,
        "secondary": event.secondary,
    }


def events_of(
    config: dict[str, Any], run: Run, thresholds: dict[str, Any] | None, rebuild: bool
) -> list[dict[str, Any]]:
    """Feed `run` to a suite (rebuilt from its JSON state every REBUILD_EVERY steps)."""
    suite = DetectorSuite(config, thresholds)
    found = []
    for index, (step, values) in enumerate(run):
        found += [fingerprint(event) for event in suite.feed(step, dict(values))]
        if rebuild and index % REBUILD_EVERY == REBUILD_EVERY - 1:
            state = json.loads(json.dumps(suite.dump_state()))
            suite = DetectorSuite(config, thresholds, state=state)
    return found


def scenario_cases() -> Iterator[Case]:
    """The §4 scenarios on several seeds."""
    from tests.detectors.scenarios import SCENARIOS

    for scenario in SCENARIOS:
        for seed in SCENARIO_SEEDS:
            yield (
                f"scenario/{scenario.name}/{seed}",
                scenario.config,
                scenario.run(seed),
                None,
                False,
            )


def batch_feed_cases() -> Iterator[Case]:
    """The runs of tests/detectors/test_batch_feed.py."""
    from tests.detectors import test_batch_feed as feed
    from tests.detectors.scenarios import base_config, s8

    for kind in feed.FAULTS:
        for seed, base in ((10, "healthy"), (12, "collapse")):
            run = feed.fuzzed_run(kind, seed, base=base)
            yield f"fault/{kind}/{seed}", base_config(500), run, None, seed == 12
    for seed in range(20, 23):
        yield f"fault/mixed/{seed}", base_config(500), feed.fuzzed_run("mixed", seed), None, True
    yield "collapse_and_recover", base_config(700), feed.collapse_and_recover(30), None, True
    yield "on_policy", base_config(400, updates_per_batch=1), feed.spikes_on_policy(31), None, False
    for controller in ("fixed", "adaptive"):
        config = base_config(500, kl_placement="reward", kl_controller=controller)
        yield f"reward_kl/{controller}", config, feed.reward_kl_run(32), None, False
    for name, config in feed.REWARD_CONFIGS.items():
        run = feed.collapse_and_recover(33, scale=(-5.0, 20.0))
        yield f"reward_bounds/{name}", config, run, None, False
    config = base_config(400, planned_steps=1_000_000)
    yield "long_warmup", config, s8(random.Random(34), 400), None, False
    for name, (per_run, server) in feed.THRESHOLD_CASES.items():
        config = base_config(700, rlguard_thresholds=per_run)
        yield f"thresholds/{name}", config, feed.collapse_and_recover(35), server, False
    yield "probes", base_config(500), feed.probes_run(36), None, True
    for rule in sorted(feed.CHANGES):
        yield f"change/{rule}", feed.QUIET_CONFIG, feed.changed_run(rule), None, False


def rollout_cases() -> Iterator[Case]:
    """The D9 cases of tests/detectors/test_rollout_mismatch.py on their S1 base."""
    from tests.detectors import test_rollout_mismatch as mismatch
    from tests.detectors.scenarios import base_config, healthy

    extras: list[Callable[[int, random.Random], dict[str, float]]] = [
        mismatch.steady_dense,
        mismatch.steady_moe,
        mismatch.drifting,
        mismatch.broken_kernel,
        mismatch.ess_decays,
        mismatch.slime_gap,
    ]
    for extra in extras:
        for seed in range(3):
            rng = random.Random(seed)
            run = [(t, {**healthy(t, rng), **extra(t, rng)}) for t in range(mismatch.STEPS)]
            yield f"rollout/{extra.__name__}/{seed}", base_config(mismatch.STEPS), run, None, False


def demo_histories(cache: Path | None) -> dict[str, list[dict[str, float]]]:
    """'preset/seed' -> its logged metrics per step, trained now or read from `cache`."""
    if cache is not None and cache.exists():
        histories: dict[str, list[dict[str, float]]] = json.loads(cache.read_text())
        return histories
    from rlguard.demo import ALL
    from rlguard.demo.parallel import train_parallel

    histories = {}
    for seed in DEMO_SEEDS:
        for name, result in train_parallel(list(ALL), DEMO_STEPS, seed=seed, workers=2).items():
            histories[f"{name}/{seed}"] = result.history
    if cache is not None:
        cache.write_text(json.dumps(histories))
    return histories


def demo_cases(cache: Path | None) -> Iterator[Case]:
    """Every demo preset on DEMO_SEEDS, fed as the demo test feeds it (steps from 1)."""
    from rlguard.demo import PRESETS

    for label, history in sorted(demo_histories(cache).items()):
        config = PRESETS[label.split("/")[0]].run_config(planned_steps=DEMO_STEPS)
        run = list(enumerate(history, start=1))
        yield f"demo/{label}", config, run, None, False


def write(path: Path, demo_cache: Path | None) -> None:
    """Run every case and write {case: [event fields, ...]}."""
    cases = [*scenario_cases(), *batch_feed_cases(), *rollout_cases(), *demo_cases(demo_cache)]
    found = {
        name: events_of(config, run, server, rebuild)
        for name, config, run, server, rebuild in cases
    }
    path.write_text(json.dumps(found, indent=1, sort_keys=True, ensure_ascii=False))
    total = sum(len(events) for events in found.values())
    print(f"{len(found)} cases, {total} events -> {path}")


def compare(before: Path, after: Path) -> int:
    """Print every event that differs between two files; the number of differences."""
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    differences = 0
    for case in sorted(old.keys() | new.keys()):
        was, now = old.get(case, []), new.get(case, [])
        for index in range(max(len(was), len(now))):
            a = was[index] if index < len(was) else None
            b = now[index] if index < len(now) else None
            if a != b:
                differences += 1
                print(f"{case} #{index}:\n  before {a}\n  after  {b}")
    print(f"{differences} differences over {len(old)} cases")
    return differences


def main() -> None:
    """Write a fingerprint file, or compare two."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=Path("alert_fingerprint.json"))
    parser.add_argument("--demo-cache", type=Path, help="the demo presets' metrics (JSON)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        sys.exit(1 if compare(*args.compare) else 0)
    write(args.output, args.demo_cache)


if __name__ == "__main__":
    main()

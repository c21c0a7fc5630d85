"""``incident`` (an alert's onset, what moved with it, samples, the config difference to the
healthiest sibling) and ``compare_runs`` (against a baseline run or the seed group's band)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from rlguard_backend.mcp.health import open_alert
from rlguard_backend.mcp.reads import sample, signal_keys
from rlguard_backend.mcp.rest import Rest, quote
from rlguard_backend.schemas.runs import flatten_config

WINDOW_STEPS = 20  # each side of the onset, to see what moved
MOVED_SHOWN = 8
SAMPLES_EACH_SIDE = 3
MAX_SIBLINGS = 200
MAX_CONFIG_DIFFERENCES = 30
NOT_MOVES = {"step_time", "lr"}  # the machine's pace and the schedule: not what the model did
DEFAULT_SIGNALS = ("entropy", "reward_mean", "ppo_kl", "clipfrac", "kl_loss", "response_length")


async def incident(rest: Rest, alert_id: int) -> dict[str, Any]:
    """The alert's onset, the signals that moved with it, samples, config diff, steps since."""
    alert = await rest.get(f"/alerts/{alert_id}")
    run = await rest.get(f"/runs/{quote(alert['run_id'])}")
    onset = alert["first_step"]
    last_step = run["last_step"] if run["last_step"] is not None else onset
    sibling = await healthiest_sibling(rest, run)
    return {
        "alert": open_alert(rest, alert) | {"status": alert["status"]},
        "run_id": run["id"],
        "onset_step": onset,
        "steps_since_onset": last_step - onset,
        "moved_with_it": await moved_signals(rest, run["id"], onset),
        "samples": await samples_around(rest, run["id"], onset),
        "healthiest_sibling": sibling
        and {
            "run_id": sibling["id"],
            "health": sibling["values"].get("health"),
            "config_differences": config_differences(run["config"], sibling["config"]),
        },
    }


async def moved_signals(rest: Rest, run_id: str, onset: int) -> list[dict[str, Any]]:
    """The run's signals ranked by how far their mean moved at the onset, in spreads before it."""
    by_signal = {s: k for s, k in (await signal_keys(rest, run_id)).items() if s not in NOT_MOVES}
    if not by_signal:
        return []
    answer = await rest.get(
        f"/runs/{quote(run_id)}/series",
        keys=",".join(by_signal.values()),
        from_step=max(onset - WINDOW_STEPS, 0),
        to_step=onset + WINDOW_STEPS,
        max_points=4 * WINDOW_STEPS,
    )
    moved: list[dict[str, Any]] = []
    for signal, key in by_signal.items():
        data = answer["series"].get(key)
        change = data and shift(data["steps"], data["values"], onset)
        if change:
            moved.append({"signal": signal, "key": key, **change})
    moved.sort(key=lambda row: -row["score"])
    return moved[:MOVED_SHOWN]


def shift(steps: list[int], values: list[Any], onset: int) -> dict[str, float] | None:
    """Mean before and from the onset, and the move in before-onset spreads (``score``)."""
    numbers = [(s, v) for s, v in zip(steps, values, strict=True) if _finite(v)]
    before = [v for s, v in numbers if s < onset]
    after = [v for s, v in numbers if s >= onset]
    if not before or not after:
        return None
    mean_before, mean_after = statistics.fmean(before), statistics.fmean(after)
    spread = statistics.pstdev(before) + 1e-3 * abs(mean_before) + 1e-12
    return {
        "before": mean_before,
        "after": mean_after,
        "score": abs(mean_after - mean_before) / spread,
    }


async def samples_around(rest: Rest, run_id: str, onset: int) -> dict[str, Any]:
    """The worst-reward samples of the last sampled step before the onset and the first from it."""
    steps = [s["step"] for s in (await rest.get(f"/runs/{quote(run_id)}/sample-steps"))["data"]]
    chosen = {
        "before": max((s for s in steps if s < onset), default=None),
        "after": min((s for s in steps if s >= onset), default=None),
    }
    found: dict[str, Any] = {}
    for side, step in chosen.items():
        if step is None:
            found[side] = {"step": None, "samples": []}
            continue
        page = await rest.get(
            f"/runs/{quote(run_id)}/samples", step=step, sort="reward", limit=SAMPLES_EACH_SIDE
        )
        found[side] = {"step": step, "samples": [sample(s) for s in page["data"]]}
    return found


async def healthiest_sibling(rest: Rest, run: dict[str, Any]) -> dict[str, Any] | None:
    """The other run of the project with the best health, fewest open alerts, most steps."""
    page = await rest.get(
        "/runs",
        project=run["project"],
        fields="health,alerts.open",
        sort="health,alerts.open,-last_step",
        limit=MAX_SIBLINGS,
    )
    return next((row for row in page["data"] if row["id"] != run["id"]), None)


def config_differences(mine: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """Flattened config keys whose values differ: key -> [this run's, the other's]."""
    a, b = flatten_config(mine), flatten_config(theirs)
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return {k: [a.get(k), b.get(k)] for k in keys[:MAX_CONFIG_DIFFERENCES]}


async def compare_runs(
    rest: Rest, run_id: str, baseline_run_id: str | None, signals: list[str] | None, bins: int
) -> dict[str, Any]:
    """The run beside a baseline run, or, without one, beside its seed group's band."""
    wanted = ",".join(signals or DEFAULT_SIGNALS)
    run = await rest.get(f"/runs/{quote(run_id)}")
    if baseline_run_id is not None:
        lines = await rest.get(
            "/groups", runs=f"{run_id},{baseline_run_id}", signals=wanted, by="id", bins=bins
        )
        by_run = {g["key"]["id"]: g["signals"] for g in lines["data"]}
        return {
            "run_id": run_id,
            "url": rest.link(run_id),
            "baseline_run_id": baseline_run_id,
            "baseline_url": rest.link(baseline_run_id),
            "signals": {
                s: _against_baseline(by_run[run_id][s], by_run[baseline_run_id][s])
                for s in by_run[run_id]
            },
        }
    siblings = await seed_siblings(rest, run)
    if not siblings:
        raise ToolError(
            f"run {run_id!r} has no seed siblings (runs of project {run['project']!r} whose "
            "config differs only in seed keys); name a baseline_run_id instead"
        )
    band = await _group(rest, siblings, wanted, bins, run["last_step"])
    own = await _group(rest, [run_id], wanted, bins, run["last_step"])
    return {
        "run_id": run_id,
        "url": rest.link(run_id),
        "seed_group": siblings,
        "signals": {s: _against_band(own[s], band[s]) for s in own},
    }


async def seed_siblings(rest: Rest, run: dict[str, Any]) -> list[str]:
    """Runs of the project whose config equals this run's but for keys naming a seed."""
    page = await rest.get("/runs", project=run["project"], limit=MAX_SIBLINGS)
    mine = _without_seeds(run["config"])
    return [
        r["id"]
        for r in page["data"]
        if r["id"] != run["id"] and _without_seeds(r["config"]) == mine
    ]


def _without_seeds(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in flatten_config(config).items() if "seed" not in k.rsplit(".")[-1]}


async def _group(
    rest: Rest, run_ids: list[str], signals: str, bins: int, last_step: int | None
) -> dict[str, Any]:
    groups = await rest.get(
        "/groups",
        runs=",".join(run_ids),
        signals=signals,
        bins=bins,
        from_step=0,
        to_step=last_step or 0,
    )
    return groups["data"][0]["signals"] if groups["data"] else {}


def _against_baseline(mine: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    gaps = [
        (abs(a - b), step, a, b)
        for step, a, b in zip(mine["steps"], mine["mean"], theirs["mean"], strict=True)
        if _finite(a) and _finite(b)
    ]
    widest = max(gaps, default=None)
    return {
        "steps": mine["steps"],
        "run": mine["mean"],
        "baseline": theirs["mean"],
        "widest_gap": widest and {"step": widest[1], "run": widest[2], "baseline": widest[3]},
    }


def _against_band(mine: dict[str, Any], band: dict[str, Any]) -> dict[str, Any]:
    outside = [
        step
        for step, value, low, high in zip(
            mine["steps"], mine["mean"], band["min"], band["max"], strict=True
        )
        if _finite(value) and _finite(low) and _finite(high) and not low <= value <= high
    ]
    return {
        "steps": mine["steps"],
        "run": mine["mean"],
        "band_mean": band["mean"],
        "band_min": band["min"],
        "band_max": band["max"],
        "steps_outside_band": outside,
    }


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

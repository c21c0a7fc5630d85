"""``run_health``: a run's status, open alerts and stability signals against their thresholds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlguard_backend.mcp.rest import Rest, quote
from rlguard_backend.stability.thresholds import DEFAULTS, resolve_thresholds


@dataclass(frozen=True)
class Limit:
    """A signal's absolute alert levels: threshold names (``group.key``) of thresholds.py."""

    signal: str
    direction: str  # "above" or "below": the side of the level that alerts
    warn: str | None
    critical: str | None


LIMITS = (
    Limit("clipfrac", "above", "clipfrac.warn", "clipfrac.critical"),
    Limit("clipfrac_dual", "above", "clipfrac.dual_clip", None),
    Limit("kl_loss", "above", "kl_runaway.level_warn", "kl_runaway.level_critical"),
    Limit("reward_kl_penalty", "above", "kl_runaway.level_warn", "kl_runaway.level_critical"),
    Limit("response_clip_ratio", "above", "length.truncation", "length.truncation_critical"),
    Limit(
        "rollout_kl",
        "above",
        "rollout_mismatch.kl_level_warn",
        "rollout_mismatch.kl_level_critical",
    ),
    Limit(
        "rollout_logprob_diff",
        "above",
        "rollout_mismatch.logprob_diff_warn",
        "rollout_mismatch.logprob_diff_critical",
    ),
    Limit("rollout_probs_corr", "below", None, "rollout_mismatch.corr_critical"),
    Limit("rollout_is_ess", "below", "rollout_mismatch.ess_warn", "rollout_mismatch.ess_critical"),
    Limit(
        "sample_degenerate",
        "above",
        "sample_quality.degenerate_warn",
        "sample_quality.degenerate_critical",
    ),
    Limit(
        "sample_repetition",
        "above",
        "sample_quality.repetition_warn",
        "sample_quality.repetition_loops",
    ),
)
# Watched against the run's own history (ratios to its start, spikes over its median), so a
# level alone says nothing: shown with the rule that reads them.
RELATIVE = {
    "entropy": "entropy_collapse: far below its start while reward does not improve",
    "ppo_kl": "kl_spike: one update past 0.5x (warn) or 1.5x (critical) the run's KL target",
    "reward_mean": "read with entropy and KL: a falling reward confirms a collapse",
    "response_length": "length: x2 its start (blow-up) or x0.3 (collapse)",
    "grad_norm": "kl_spike: x10 its running median",
}
ALERT_FIELDS = ("id", "detector", "key", "severity", "first_step", "last_step", "message")


async def run_health(rest: Rest, run_id: str) -> dict[str, Any]:
    """Status, last step, open alerts with evidence and advice, signals against thresholds."""
    run = await rest.get(f"/runs/{quote(run_id)}")
    signals = [limit.signal for limit in LIMITS] + list(RELATIVE)
    fields = ",".join(["health", *(f"last.{s}" for s in signals)])
    rows = await rest.get(
        "/runs",
        filter=f"id:eq:{run_id}",
        fields=fields,
        archived=run.get("archived_at") is not None,
        limit=1,
    )
    values = rows["data"][0]["values"] if rows["data"] else {}
    listed = await rest.get(f"/runs/{quote(run_id)}/alerts", limit=100)
    # open now, or open when the run ended (closed with it): the run's standing alerts
    standing = [a for a in listed["data"] if a["status"] == "open" or a.get("closed_with_run")]
    return {
        "run_id": run_id,
        "url": rest.link(run_id),
        "status": run["status"],
        "last_step": run["last_step"],
        "health": values.get("health"),
        "open_alerts": [open_alert(rest, a) for a in standing[:20]],
        "signals": signal_levels(values, run.get("config") or {}),
    }


def open_alert(rest: Rest, alert: dict[str, Any]) -> dict[str, Any]:
    """An alert as a tool shows it: what, where (with the run page at its steps), the evidence
    and the advice."""
    shown = {name: alert[name] for name in ALERT_FIELDS}
    url = rest.link(alert["run_id"], alert["first_step"], alert["last_step"])
    return {**shown, "url": url, "evidence": alert["evidence"], "advice": alert["advice"]}


def signal_levels(values: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """Each logged signal's last value beside its thresholds (per-run overrides applied)."""
    thresholds = _thresholds(config)
    levels: dict[str, Any] = {}
    for limit in LIMITS:
        value = values.get(f"last.{limit.signal}")
        if value is None:
            continue
        warn, critical = (_lookup(thresholds, name) for name in (limit.warn, limit.critical))
        levels[limit.signal] = {
            "last": value,
            "alerts": limit.direction,
            "warn": warn,
            "critical": critical,
            "level": _level(value, limit.direction, warn, critical),
        }
    for signal, rule in RELATIVE.items():
        value = values.get(f"last.{signal}")
        if value is not None:
            levels[signal] = {"last": value, "rule": rule}
    return levels


def _thresholds(config: dict[str, Any]) -> dict[str, dict[str, float]]:
    try:
        return resolve_thresholds(None, config.get("rlguard_thresholds"))
    except (ValueError, TypeError, AttributeError):  # the detectors fell back to the defaults too
        return DEFAULTS


def _lookup(thresholds: dict[str, dict[str, float]], name: str | None) -> float | None:
    if name is None:
        return None
    group, _, key = name.partition(".")
    return thresholds[group][key]


def _level(value: Any, direction: str, warn: float | None, critical: float | None) -> str:
    if not isinstance(value, (int, float)):
        return "not a number"
    for name, level in (("critical", critical), ("warn", warn)):
        if level is not None and (value > level if direction == "above" else value < level):
            return name
    return "ok"

"""How a run's state reads on the page: status (with "stale"), age, headline config."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from rlguard_backend.schemas import RunPublic

STALE_AFTER = timedelta(minutes=2)
HEADLINE_CONFIG = (
    "algorithm",
    "kl_placement",
    "kl_target",
    "kl_coef",
    "clip_ratio_low",
    "clip_ratio_high",
    "clip_ratio_c",
    "updates_per_batch",
    "lr",
)


def display_status(run: RunPublic, now: datetime | None = None) -> str:
    """The run's status, or ``stale`` when a running run's heartbeats stopped."""
    now = now or datetime.now(timezone.utc)
    seen = run.last_heartbeat_at or run.updated_at
    if seen.tzinfo is None:
        seen = seen.replace(tzinfo=timezone.utc)
    if run.status == "running" and now - seen > STALE_AFTER:
        return "stale"
    return run.status


def age(moment: datetime, now: datetime | None = None) -> str:
    """``"42s ago"``, ``"5m ago"``, ``"3h ago"``, ``"2d ago"``."""
    now = now or datetime.now(timezone.utc)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    seconds = max(0, int((now - moment).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def headline_config(run: RunPublic) -> list[tuple[str, str]]:
    """The config entries that explain a run's limiters, as (key, value) text."""
    return [(k, str(run.config[k])) for k in HEADLINE_CONFIG if k in run.config]

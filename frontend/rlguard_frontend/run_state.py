"""How a run's state reads on the page: status (with "stale"), why it stopped, age, headline
config, its W&B link."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

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


def stopped_by(run: RunPublic) -> str | None:
    """What stopped a ``stopped`` run, from the ``stopped_by`` its hook stored in the summary:
    ``"stopped by alert #12 (kl_runaway)"`` or ``"stopped by a command from alice"``."""
    cause = run.summary.get("stopped_by")
    if run.status != "stopped" or not isinstance(cause, dict):
        return None
    if cause.get("alert") is not None:
        detector = f" ({cause['detector']})" if cause.get("detector") else ""
        return f"stopped by alert #{cause['alert']}{detector}"
    if cause.get("command") is not None:
        who = cause.get("requested_by")
        return f"stopped by a command from {who}" if who else "stopped by a command"
    return None


def wandb_url(run: RunPublic) -> str | None:
    """The W&B run's page (``config.wandb.url``, stored by ``rlguard watch``) when it is an
    http(s) URL; anything else (a ``javascript:`` URL, a path) is never made a link."""
    wandb = run.config.get("wandb")
    url = wandb.get("url") if isinstance(wandb, dict) else None
    if not isinstance(url, str):
        return None
    parts = urlsplit(url.strip())
    return url.strip() if parts.scheme.lower() in ("http", "https") and parts.netloc else None

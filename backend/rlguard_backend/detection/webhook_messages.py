"""What a webhook receives: the message of an alert change, its Slack and Discord variants,
the link to the run page, and the signature headers.

The outbox stores the ``json`` message (``WebhookMessage``); the variant a hook asks for is
drawn from it when it is sent, so a hook whose format changes meanwhile gets the new one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from rlguard.protocol import run_page_url
from rlguard_backend.models import Run
from rlguard_backend.schemas import AlertPublic
from rlguard_backend.schemas.webhooks import WebhookMessage, WebhookRun

SEVERITY_ICON = {
    "info": ":information_source:",
    "warn": ":warning:",
    "critical": ":rotating_light:",
}
DISCORD_COLOUR = {"info": 0x3498DB, "warn": 0xF1C40F, "critical": 0xE74C3C, "resolved": 0x2ECC71}
SLACK_TEXT_CHARS = 2900  # a section block holds 3000
DISCORD_TEXT_CHARS = 4000  # an embed's description holds 4096
PATH_SHOWN_CHARS = 12  # of a hook url's path, shown after creation
SIGNATURE_HEADER = "X-Rlguard-Signature"
TIMESTAMP_HEADER = "X-Rlguard-Timestamp"


def run_url(public_url: str, run_id: str, first_step: int, last_step: int) -> str | None:
    """The run page zoomed on steps ``first_step``..``last_step`` (with a margin), or None
    without a public URL.

    >>> run_url("https://rl.example.com", "grpo-7", 120, 130)
    'https://rl.example.com/runs/grpo-7?from=70&to=180'
    """
    return run_page_url(public_url, run_id, first_step, last_step) if public_url else None


def shown_url(url: str) -> str:
    """A hook's url as listed and logged: a Slack or Discord hook's url carries its token in
    the path, so the path is cut (and credentials and the query left out).

    >>> shown_url("https://hooks.slack.com/services/T0001/B0001/XXXXXXXX")
    'https://hooks.slack.com/services/T0…'
    >>> shown_url("http://127.0.0.1:8080/hook")
    'http://127.0.0.1:8080/hook'
    """
    try:
        parts = urlsplit(url)
    except ValueError:  # a netloc urllib cannot read (an unmatched "["): show its start only
        return url[: len("https://") + PATH_SHOWN_CHARS] + "…"
    host = parts.netloc.rpartition("@")[2]
    path = parts.path[:PATH_SHOWN_CHARS]
    cut = len(parts.path) > PATH_SHOWN_CHARS or parts.query or parts.fragment
    return f"{parts.scheme}://{host}{path}{'…' if cut else ''}"


def alert_message(
    run: Run | WebhookRun, alert: AlertPublic, event: str, public_url: str, sent_at: datetime
) -> WebhookMessage:
    """The message of one alert change (``event``: ``alert.opened`` …, or ``test``)."""
    return WebhookMessage(
        event=event,  # type: ignore[arg-type]  # one of the Literal's, by the callers
        run=WebhookRun(id=run.id, project=run.project, name=run.name),
        alert=alert,
        run_url=run_url(public_url, run.id, alert.first_step, alert.last_step),
        sent_at=sent_at,
    )


def render(message: dict[str, Any], fmt: str) -> dict[str, Any]:
    """The body a hook of format ``fmt`` is sent: the message itself, or its Slack or
    Discord variant. A body stored already drawn (by a release before 0.10) is sent as is."""
    if fmt == "json" or "event" not in message:
        return message
    parsed = WebhookMessage.model_validate(message)
    return slack_message(parsed) if fmt == "slack" else discord_message(parsed)


def _title(message: WebhookMessage) -> str:
    what = message.event.removeprefix("alert.")
    return f"rlguard: {message.alert.detector} {what} ({message.alert.severity})"


def _where(message: WebhookMessage) -> str:
    run, alert = message.run, message.alert
    return f"run {run.name or run.id} ({run.project}), steps {alert.first_step}-{alert.last_step}"


def _slack_escape(text: str) -> str:
    """Slack's three control characters, so a run name cannot mention a channel or link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_message(message: WebhookMessage) -> dict[str, Any]:
    """A Slack incoming-webhook message: a fallback text and blocks, linking the run."""
    icon = SEVERITY_ICON.get(message.alert.severity, "")
    title = f"{icon} {_slack_escape(_title(message))}"
    where = _slack_escape(_where(message))
    if message.run_url:
        where += f" · <{message.run_url}|open the run>"
    advice = "\n".join(f"• {_slack_escape(str(line))}" for line in message.alert.advice[:5])
    text = _slack_escape(message.alert.message)[:SLACK_TEXT_CHARS]
    blocks = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{title}*\n{where}"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": text or "(no message)"}},
    ]
    if advice:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": advice}})
    return {"text": f"{title} — {where}", "blocks": blocks}


def discord_message(message: WebhookMessage) -> dict[str, Any]:
    """A Discord webhook message: one embed titled with the change, linking the run."""
    alert = message.alert
    colour = DISCORD_COLOUR["resolved" if alert.status == "resolved" else alert.severity]
    description = alert.message[:DISCORD_TEXT_CHARS]
    if alert.advice:
        description += "\n\n" + "\n".join(f"• {line}" for line in alert.advice[:5])
    embed: dict[str, Any] = {
        "title": _title(message)[:256],
        "description": description[:DISCORD_TEXT_CHARS],
        "color": colour,
        "fields": [
            {"name": "run", "value": (message.run.name or message.run.id)[:1024], "inline": True},
            {"name": "project", "value": message.run.project[:1024], "inline": True},
            {"name": "steps", "value": f"{alert.first_step}-{alert.last_step}", "inline": True},
        ],
        "timestamp": message.sent_at.isoformat(),
    }
    if message.run_url:
        embed["url"] = message.run_url
    # No pings: a run name or message saying @everyone mentions nobody.
    return {"content": _where(message)[:2000], "embeds": [embed], "allowed_mentions": {"parse": []}}


def encode(body: dict[str, Any]) -> bytes:
    """The raw bytes sent (and signed)."""
    return json.dumps(body, separators=(",", ":")).encode()


def signature(secret: str, timestamp: int, raw_body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 of ``"<timestamp>." + raw body`` keyed with the secret.

    >>> signature("s3cret", 1700000000, b'{}')[:15]
    'sha256=97926816'
    """
    signed = str(timestamp).encode() + b"." + raw_body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signed_headers(secret: str | None, timestamp: int, raw_body: bytes) -> dict[str, str]:
    """The signature headers of a message; none for a hook without a secret."""
    if not secret:
        return {}
    return {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature(secret, timestamp, raw_body),
    }

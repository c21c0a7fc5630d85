"""Webhooks: the hooks managed over REST, and the message every hook receives.

``WebhookMessage`` is the payload of a ``json`` hook, and what the Slack and Discord variants
are drawn from; docs/reference/webhooks.md lists its fields from this module.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from rlguard_backend.schemas.alerts import AlertPublic
from rlguard_backend.schemas.wire import NUL_FREE, NoNul, Severity, StrictBool

WebhookFormat = Literal["json", "slack", "discord"]
AlertChange = Literal["opened", "escalated", "resolved"]
ALERT_CHANGES: tuple[AlertChange, ...] = ("opened", "escalated", "resolved")
SECRET_PREFIX_CHARS = 8  # of a hook's secret, shown after creation
# The pattern refuses NUL and every other control character (NoNul's pattern would replace it
# in the document; http.client refuses them in a url), and comes before the validator:
# constraints after an AfterValidator are left out of the document.
HookUrl = Annotated[
    str, StringConstraints(pattern=r"^https?://[^\s\x00-\x1f\x7f]+$", max_length=2048), NUL_FREE
]
HookProject = Annotated[str, NoNul, NUL_FREE, Field(min_length=1, max_length=128)]


class WebhookRun(BaseModel):
    """The run an alert belongs to."""

    id: str
    project: str
    name: str | None


class WebhookMessage(BaseModel):
    """What a ``json`` hook receives for one alert change (and for a test)."""

    event: Literal["alert.opened", "alert.escalated", "alert.resolved", "test"] = Field(
        description="what happened: an alert opened, escalated to a higher severity, "
        "resolved; or a test sent from the API or the dashboard"
    )
    run: WebhookRun
    alert: AlertPublic = Field(description="the alert as GET /api/v1/alerts answers it")
    run_url: str | None = Field(
        description="the run page zoomed on the alert's steps; null until the service's "
        "RLGUARD_PUBLIC_URL is set"
    )
    sent_at: datetime = Field(description="when the change was stored (UTC)")


class WebhookCreate(BaseModel):
    """A hook to add; ``project`` null: every project's alerts."""

    model_config = ConfigDict(extra="forbid")

    url: HookUrl = Field(description="http(s) address the service POSTs each message to")
    format: WebhookFormat = Field(
        default="json",
        description="json: the WebhookMessage; slack: an incoming-webhook message with "
        "blocks; discord: a webhook message with an embed",
    )
    project: HookProject | None = Field(
        default=None, description="only this project's alerts; none: every project's"
    )
    min_severity: Severity = Field(
        default="info", description="the least severity of an alert that is sent"
    )
    events: list[AlertChange] = Field(
        default_factory=lambda: list(ALERT_CHANGES),
        min_length=1,
        description="which alert changes are sent",
    )
    enabled: StrictBool = True


class WebhookUpdate(BaseModel):
    """Change a hook: a field left out (or null) stays as it is; ``"project": null`` makes it
    take every project's alerts."""

    model_config = ConfigDict(extra="forbid")

    url: HookUrl | None = None
    format: WebhookFormat | None = None
    project: HookProject | None = None
    min_severity: Severity | None = None
    events: list[AlertChange] | None = Field(default=None, min_length=1)
    enabled: StrictBool | None = None

    @model_validator(mode="after")
    def _null_keeps_all_but_project(self) -> WebhookUpdate:
        for field in list(self.model_fields_set):
            if field != "project" and getattr(self, field) is None:
                self.model_fields_set.discard(field)  # as if left out
        return self


class WebhookPublic(BaseModel):
    """A hook as listed: its secret only by its first characters."""

    id: int
    url: str = Field(
        description="the url, its path cut after 12 characters and its query left out: a "
        "Slack or Discord hook's url holds its token"
    )
    format: WebhookFormat
    project: str | None
    min_severity: Severity
    events: list[AlertChange]
    enabled: bool
    secret_prefix: str = Field(description="the secret's first characters, to tell hooks apart")
    created_at: datetime
    created_by: str
    updated_at: datetime


class WebhookCreated(WebhookPublic):
    secret: str = Field(
        description="the signing secret, shown this once: a receiver checks "
        "X-Rlguard-Signature with it (docs/reference/webhooks.md)"
    )


class WebhookList(BaseModel):
    data: list[WebhookPublic]
    count: int


class WebhookTestResult(BaseModel):
    """What the receiver said to a test message."""

    delivered: bool = Field(description="the receiver answered 2xx")
    status_code: int | None = Field(description="its HTTP status; null when none came")
    response: str = Field(description="the first characters of its answer, or the error")
    elapsed_ms: float

"""Commands to a run's trainer (stop, checkpoint): a request in, as served with its history."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from rlguard_backend.schemas.wire import (
    NUL_FREE,
    BodyStep,
    NoNul,
    Severity,
    StrictBool,
    integral,
)

CommandKind = Literal["stop", "checkpoint"]
COMMAND_KINDS: tuple[str, ...] = ("stop", "checkpoint")
CommandState = Literal["pending", "delivered", "acted"]
Reason = Annotated[str, StringConstraints(max_length=1000), NoNul, NUL_FREE]
User = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100), NoNul, NUL_FREE
]


class CommandIn(BaseModel):
    """Why the command is sent, and the alert that prompted it, if one did."""

    model_config = ConfigDict(extra="forbid")

    reason: Reason | None = Field(default=None, description="shown to whoever reads the run")
    alert_id: int | None = Field(default=None, ge=1, description="the alert it answers")
    on_behalf_of: User | None = Field(
        default=None,
        description="the person a front end (the dashboard behind SSO) asks for; recorded "
        "beside the token's name, 'alice (via dashboard)', never instead of it",
    )


class CommandUpdate(BaseModel):
    """What the trainer's hook reports: it received the command, or the trainer acted on it."""

    model_config = ConfigDict(extra="forbid")

    delivered: StrictBool = False
    acted: StrictBool = False
    step: BodyStep | None = Field(default=None, description="the step the trainer acted at")


class CommandPublic(BaseModel):
    id: int
    run_id: str
    kind: CommandKind
    state: CommandState = Field(
        description="pending until the trainer's hook receives it, then delivered, then acted"
    )
    reason: str | None
    requested_by: str = Field(
        description="the token's name, or the signed-in user with it: 'alice (via dashboard)'"
    )
    alert_id: int | None
    requested_at: datetime
    requested_step: int | None = Field(description="the run's last step when it was asked")
    delivered_at: datetime | None
    acted_at: datetime | None
    acted_step: int | None
    policy_id: int | None = Field(description="the project's policy that asked, if one did")
    dry_run: bool = Field(description="a dry-run policy's: recorded, never sent")


class CommandList(BaseModel):
    data: list[CommandPublic]
    count: int


AlertName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=128, pattern=r"^[a-z0-9_]+(/[a-z0-9_]+)?$"),
]


class PolicyIn(BaseModel):
    """Stop (or checkpoint) a run when ``alert`` reaches ``severity`` and persists
    ``persist_steps`` steps."""

    model_config = ConfigDict(extra="forbid")

    alert: AlertName = Field(
        description="a detector (entropy_collapse) or one of its alert keys (kl_runaway/level)"
    )
    severity: Severity = "critical"
    persist_steps: Annotated[
        int, Field(ge=0, le=1_000_000, strict=True), BeforeValidator(integral)
    ] = Field(default=0, description="0: at once")
    action: CommandKind = "stop"
    dry_run: StrictBool = Field(default=False, description="record what it would do, send nothing")


class PolicyPublic(PolicyIn):
    id: int
    project: str
    created_by: str
    created_at: datetime


class PolicyList(BaseModel):
    data: list[PolicyPublic]
    count: int


class PolicyHit(BaseModel):
    """Where a policy would have acted on a stored run, and the steps that would have saved."""

    run_id: str
    run_name: str | None
    alert_id: int
    step: int = Field(description="the step it would have acted at")
    last_step: int | None = Field(description="the run's last stored step")
    steps_saved: int = Field(description="last_step - step: steps trained after it would act")


class PolicyBacktest(BaseModel):
    policy: PolicyIn
    project: str
    runs: int = Field(description="runs of the project looked at")
    data: list[PolicyHit]
    count: int
    steps_saved: int

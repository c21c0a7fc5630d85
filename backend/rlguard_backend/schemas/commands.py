"""Commands to a run's trainer (stop, checkpoint): a request in, as served with its history."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from rlguard_backend.schemas.wire import NUL_FREE, BodyStep, NoNul, StrictBool

CommandKind = Literal["stop", "checkpoint"]
COMMAND_KINDS: tuple[str, ...] = ("stop", "checkpoint")
CommandState = Literal["pending", "delivered", "acted"]
Reason = Annotated[str, StringConstraints(max_length=1000), NoNul, NUL_FREE]


class CommandIn(BaseModel):
    """Why the command is sent, and the alert that prompted it, if one did."""

    model_config = ConfigDict(extra="forbid")

    reason: Reason | None = Field(default=None, description="shown to whoever reads the run")
    alert_id: int | None = Field(default=None, ge=1, description="the alert it answers")


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
    requested_by: str = Field(description="the token's name or the signed-in user")
    alert_id: int | None
    requested_at: datetime
    requested_step: int | None = Field(description="the run's last step when it was asked")
    delivered_at: datetime | None
    acted_at: datetime | None
    acted_step: int | None


class CommandList(BaseModel):
    data: list[CommandPublic]
    count: int

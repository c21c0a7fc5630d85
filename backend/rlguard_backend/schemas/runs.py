"""Runs: create, update, rewind, archive, heartbeats and drops, the runs grid's rows, fields,
projects, groups and markers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
)

from rlguard.protocol import MAX_STEP
from rlguard_backend.schemas.points import SeriesData
from rlguard_backend.schemas.wire import (
    BodyStep,
    FreeJson,
    Project,
    RunId,
    RunName,
    RunStatus,
    Tag,
    integral,
)


class RunCreate(BaseModel):
    """Create a run, or resume the run with this ``id``."""

    model_config = ConfigDict(extra="forbid")

    id: RunId
    project: Project
    name: RunName | None = None
    config: FreeJson = Field(default_factory=dict)
    tags: list[Tag] = Field(default_factory=list, max_length=64)
    resume_from_step: BodyStep | None = None


class RunUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: RunStatus | None = None
    name: RunName | None = None
    summary: FreeJson | None = None


class RunsDeleted(BaseModel):
    deleted: int
    run_ids: list[str]


class RunsArchived(BaseModel):
    archived: bool = Field(description="true: archived now; false: back in the lists")
    run_ids: list[str]


class RunRewind(BaseModel):
    model_config = ConfigDict(extra="forbid")

    resume_from_step: BodyStep


Count = Annotated[int, Field(ge=0, le=MAX_STEP, strict=True), BeforeValidator(integral)]


class Dropped(BaseModel):
    """What trainer processes dropped without delivering it: points (their spool full or
    unwritable), whole steps (their log queue over its budget) and rollout samples."""

    points: Count = 0
    steps: Count = 0
    samples: Count = 0


class ClientDrops(Dropped):
    """One trainer process's drops since it started; reported again as they grow."""

    model_config = ConfigDict(extra="forbid")

    process: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")] = Field(
        description="an id the process chose at start; its later reports replace earlier ones"
    )


class HeartbeatIn(BaseModel):
    """Liveness; a trainer that dropped data says how much."""

    model_config = ConfigDict(extra="forbid")

    drops: ClientDrops | None = None


class RunPublic(BaseModel):
    id: str
    project: str
    name: str | None
    status: RunStatus
    config: dict[str, Any]
    summary: dict[str, Any]
    tags: list[str]
    last_step: int | None
    resume_from_step: int | None
    created_at: datetime
    updated_at: datetime
    last_heartbeat_at: datetime | None
    archived_at: datetime | None = Field(
        default=None, description="set while archived: left out of the run and alert lists"
    )
    dropped: Dropped = Field(
        default_factory=Dropped, description="what the run's trainers reported dropping"
    )


def flatten_config(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys, the way run fields name them (``config.<key>``).

    >>> flatten_config({"lr": 1e-6, "actor": {"clip": 0.2}, "tags": [1], "empty": {}})
    {'lr': 1e-06, 'actor.clip': 0.2, 'tags': [1], 'empty': {}}
    """
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten_config(value, f"{name}."))
        else:
            out[name] = value
    return out


class RunRow(RunPublic):
    """A listed run with the computed fields asked for (``fields=hparam.lr,last.entropy``)."""

    values: dict[str, Any] = Field(default_factory=dict)


class RunList(BaseModel):
    """A page of runs; ``count`` is how many match the filters in all (every page)."""

    data: list[RunRow]
    count: int


class RunFieldPublic(BaseModel):
    """A field runs can be listed, sorted and filtered by, and how many runs have it."""

    name: str
    kind: Literal["text", "number", "json", "date"]
    runs: int


class ProjectPublic(BaseModel):
    name: str
    runs: int


class ProjectList(BaseModel):
    data: list[ProjectPublic]
    count: int


class BandPublic(BaseModel):
    """One group's line of one signal: per bin centre, mean and spread over ``n`` runs."""

    steps: list[float]
    mean: list[float | None]
    std: list[float | None]
    min: list[float | None]
    max: list[float | None]
    n: list[int]


class GroupPublic(BaseModel):
    """Runs sharing the values of the grouping fields, with their bands per signal."""

    key: dict[str, Any]
    runs: list[str]
    signals: dict[str, BandPublic]


class GroupList(BaseModel):
    by: list[str]
    smoothing: float
    bins: int
    data: list[GroupPublic]
    count: int


class RunSeries(BaseModel):
    """One run of several read at once, with the series of its first key (by name) of each
    asked-for signal it logs."""

    run: RunPublic
    keys: dict[str, str] = Field(description="signal -> the key read for it")
    series: dict[str, SeriesData] = Field(description="signal -> that key's series")


class RunSeriesList(BaseModel):
    data: list[RunSeries]
    count: int


class Marker(BaseModel):
    """A moment drawn across a run's charts: a restart, a rewind, a learning-rate change, a
    stop or checkpoint command."""

    step: int
    kind: Literal["restart", "rewind", "lr_change", "stop", "checkpoint"]
    label: str


class MarkerList(BaseModel):
    data: list[Marker]
    count: int


class RunFieldList(BaseModel):
    data: list[RunFieldPublic]
    count: int


class Heartbeat(BaseModel):
    id: str
    status: RunStatus
    last_heartbeat_at: datetime
    dropped: Dropped = Field(default_factory=Dropped)

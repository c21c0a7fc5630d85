"""Metric points: a batch of steps in, its acknowledgement, keys and series out."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from rlguard_backend.schemas.alerts import AlertPublic
from rlguard_backend.schemas.commands import CommandPublic
from rlguard_backend.schemas.wire import BatchId, BodyStep, PointValues, WallTime, WireFloat


class StepIn(BaseModel):
    """The values logged at one step; ``time`` is the trainer's wall clock (Unix seconds)."""

    model_config = ConfigDict(extra="forbid")

    step: BodyStep
    time: WallTime | None = None
    values: PointValues


class BatchIn(BaseModel):
    """One ingest request: a client-chosen ``batch_id`` makes replays harmless."""

    model_config = ConfigDict(extra="forbid")

    batch_id: BatchId
    steps: list[StepIn]


class BatchAck(BaseModel):
    batch_id: str
    duplicate: bool = Field(
        description="true when this batch id was stored before; nothing written"
    )
    points: int = Field(description="points in the batch")
    steps: int
    alerts: list[AlertPublic] = Field(description="alerts opened or escalated by this batch")
    commands: list[CommandPublic] = Field(
        default_factory=list,
        description="stop and checkpoint commands for the trainer that its hook has not received",
    )


class MetricKeyPublic(BaseModel):
    name: str
    signal: str | None
    count: int
    first_step: int | None
    last_step: int | None


class MetricKeyList(BaseModel):
    data: list[MetricKeyPublic]
    count: int


class SeriesData(BaseModel):
    """One key's points; when ``downsampled``, per bucket min/max accompany the drawn points."""

    steps: list[int]
    values: list[WireFloat]
    times: list[float | None] | None = None
    downsampled: bool
    method: Literal["raw", "minmax"]
    total_points: int = Field(description="points in the requested range before downsampling")
    bucket_size: int | None = None
    bucket_start: list[int] | None = None
    min: list[WireFloat] | None = None
    max: list[WireFloat] | None = None
    last_step: int | None = Field(description="the key's last stored step: the next live cursor")
    smoothed: list[WireFloat] | None = Field(
        default=None, description="debiased EMA at each returned step, when smoothing was asked"
    )


class SeriesResponse(BaseModel):
    run_id: str
    series: dict[str, SeriesData]
    missing: list[str] = Field(default_factory=list, description="asked-for keys never logged")

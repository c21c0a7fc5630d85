"""Alerts: as served, updated in bulk, and the detector backtest's request and result."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
)

from rlguard_backend.schemas.wire import AlertStatus, BodyStep, Severity, StrictBool


class AlertPublic(BaseModel):
    id: int
    run_id: str
    run_name: str | None = Field(description="the run's name, when it was given one")
    project: str = Field(description="the run's project")
    detector: str
    key: str = Field(description="which rule of the detector; one open alert per detector and key")
    severity: Severity
    status: AlertStatus
    secondary: bool
    acknowledged: bool
    closed_with_run: bool = Field(
        default=False,
        description="resolved because its run finished, stopped or failed, not because it cleared",
    )
    first_step: int
    last_step: int
    message: str
    evidence: dict[str, Any]
    advice: list[Any]
    created_at: datetime
    updated_at: datetime


class AlertList(BaseModel):
    data: list[AlertPublic]
    count: int


class AlertUpdate(BaseModel):
    """Acknowledge an alert, or resolve it by hand."""

    model_config = ConfigDict(extra="forbid")

    acknowledged: StrictBool | None = None
    status: Literal["resolved"] | None = None


def _overrides_schema() -> dict[str, Any]:
    """The thresholds' names and bounds, from the detectors' defaults (read when the document
    is built, so the wire format imports no detector code)."""
    from rlguard_backend.stability.thresholds import overrides_schema

    return overrides_schema()


class DetectRequest(BaseModel):
    """Re-run the detectors over a stored run (a backtest), optionally with other thresholds."""

    model_config = ConfigDict(extra="forbid")

    thresholds: dict[str, Any] = Field(
        default_factory=dict,
        description='overrides by flat name, e.g. {"entropy_collapse.spent_ratio": 0.4}; a count '
        "is a whole number from 1 to 100,000, any other a finite number of its default's sign",
        json_schema_extra=lambda schema: schema.update(_overrides_schema()),
    )
    apply: StrictBool = Field(
        default=False,
        description="replace the run's live alerts and detector state with the result",
    )
    from_step: BodyStep = Field(default=0, description="the first step replayed")
    to_step: BodyStep | None = Field(
        default=None,
        description="the last step replayed; none: the run's newest; before from_step: nothing. "
        "A range and apply together are refused (409): apply replays the whole run",
    )

    @field_validator("thresholds")
    @classmethod
    def _known_thresholds_in_bounds(cls, overrides: dict[str, Any]) -> dict[str, Any]:
        from rlguard_backend.stability.thresholds import check_flat_overrides

        check_flat_overrides(overrides)
        return overrides


class BacktestAlert(BaseModel):
    detector: str
    key: str
    severity: Severity
    status: AlertStatus
    secondary: bool
    first_step: int
    last_step: int
    message: str
    evidence: dict[str, Any]
    advice: list[Any]


class DetectResult(BaseModel):
    run_id: str
    steps: int = Field(description="steps fed to the detectors")
    applied: bool
    alerts: list[BacktestAlert]
    missing: dict[str, str] = Field(description="detectors degraded or disabled, and why")

"""Alerts: as served, updated in bulk, and the detector backtest's request and result."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
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


class DetectRequest(BaseModel):
    """Re-run the detectors over a stored run (a backtest), optionally with other thresholds."""

    model_config = ConfigDict(extra="forbid")

    thresholds: dict[str, Any] = Field(
        default_factory=dict, description='overrides, e.g. {"entropy_collapse.rho_warn": 0.6}'
    )
    apply: StrictBool = Field(
        default=False,
        description="replace the run's live alerts and detector state with the result",
    )
    from_step: BodyStep = Field(default=0, description="the first step replayed")
    to_step: BodyStep | None = Field(
        default=None, description="the last step replayed; none: the run's newest"
    )

    @model_validator(mode="after")
    def _range_is_whole_when_applied(self) -> DetectRequest:
        if self.to_step is not None and self.to_step < self.from_step:
            raise ValueError(
                f"to_step must be at least from_step (to_step={self.to_step}, "
                f"from_step={self.from_step})"
            )
        if self.apply and (self.from_step > 0 or self.to_step is not None):
            raise ValueError(
                "apply replaces the run's alerts and detector state, so it replays the whole "
                "run: drop from_step and to_step, or backtest the range with apply=false"
            )
        return self


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

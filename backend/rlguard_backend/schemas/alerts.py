"""Alerts: as served, updated in bulk, and the detector backtest's request and result."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
)

from rlguard_backend.schemas.wire import AlertStatus, Severity, StrictBool
from rlguard_backend.stability.thresholds import DEFAULTS


class AlertPublic(BaseModel):
    id: int
    run_id: str
    detector: str
    key: str = Field(description="which rule of the detector; one open alert per detector and key")
    severity: Severity
    status: AlertStatus
    secondary: bool
    acknowledged: bool
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


def _thresholds_schema() -> dict[str, Any]:
    """Overrides as ``resolve_thresholds`` takes them: by group (``{"kl_spike": {"z_warn": 5}}``)
    or flat (``{"kl_spike.z_warn": 5}``), each a number, every name one of DEFAULTS'."""
    number = {"type": "number"}
    nested = {
        group: {
            "type": "object",
            "properties": dict.fromkeys(keys, number),
            "additionalProperties": False,
        }
        for group, keys in DEFAULTS.items()
    }
    flat = {f"{group}.{key}": number for group, keys in DEFAULTS.items() for key in keys}
    return {"type": "object", "properties": nested | flat, "additionalProperties": False}


class DetectRequest(BaseModel):
    """Re-run the detectors over a stored run (a backtest), optionally with other thresholds."""

    model_config = ConfigDict(extra="forbid")

    thresholds: Annotated[dict[str, Any], WithJsonSchema(_thresholds_schema())] = Field(
        default_factory=dict,
        description="overrides of the detectors' thresholds (DETECTORS.md), e.g. "
        '{"entropy_collapse.rho_warn": 0.6}; an unknown name or a value not a number is 422',
    )
    apply: StrictBool = Field(
        default=False,
        description="replace the run's live alerts and detector state with the result",
    )


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

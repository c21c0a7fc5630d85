"""Request and response models: the single source of the v1 wire format.

Non-finite numbers travel as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` in both
directions, because JSON has no literal for them.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

RunStatus = Literal["running", "finished", "crashed", "failed"]
RUN_STATUSES: tuple[str, ...] = ("running", "finished", "crashed", "failed")
Severity = Literal["info", "warn", "critical"]
AlertStatus = Literal["open", "resolved"]

RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$"
RunId = Annotated[str, StringConstraints(pattern=RUN_ID_PATTERN)]
Project = Annotated[str, StringConstraints(min_length=1, max_length=128, strip_whitespace=True)]
Tag = Annotated[str, StringConstraints(min_length=1, max_length=128)]
MetricName = Annotated[str, StringConstraints(min_length=1, max_length=256)]
BatchId = Annotated[str, StringConstraints(min_length=1, max_length=64)]
Step = Annotated[int, Field(ge=0, le=2**62)]

NONFINITE_TO_WIRE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
WireFloat = float | str


def float_to_wire(value: float | None) -> WireFloat:
    """Encode one stored value (``None`` is NaN) for JSON."""
    if value is None:
        return "NaN"
    if math.isfinite(value):
        return value
    return NONFINITE_TO_WIRE[repr(value)]


def nonfinite_as_wire(value: Any) -> Any:
    """Non-finite floats inside free-form JSON (config, summary) as their wire strings.

    Python's JSON parser accepts NaN and Infinity literals, but PostgreSQL's JSON does not, and
    SQLite would turn them into null: keep them as the strings the wire format uses instead.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return float_to_wire(value)
    if isinstance(value, dict):
        return {key: nonfinite_as_wire(item) for key, item in value.items()}
    if isinstance(value, list):
        return [nonfinite_as_wire(item) for item in value]
    return value


FreeJson = Annotated[dict[str, Any], AfterValidator(nonfinite_as_wire)]


class RunCreate(BaseModel):
    """Create a run, or resume the run with this ``id``."""

    model_config = ConfigDict(extra="forbid")

    id: RunId
    project: Project
    name: Annotated[str, StringConstraints(max_length=256)] | None = None
    config: FreeJson = Field(default_factory=dict)
    tags: list[Tag] = Field(default_factory=list, max_length=64)
    resume_from_step: Step | None = None


class RunUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: RunStatus | None = None
    name: Annotated[str, StringConstraints(max_length=256)] | None = None
    summary: FreeJson | None = None


class RunsDeleted(BaseModel):
    deleted: int
    run_ids: list[str]


class RunsArchived(BaseModel):
    archived: bool = Field(description="true: archived now; false: back in the lists")
    run_ids: list[str]


class RunRewind(BaseModel):
    model_config = ConfigDict(extra="forbid")

    resume_from_step: Step


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


class Marker(BaseModel):
    """A moment drawn across a run's charts: a restart, a rewind, a learning-rate change."""

    step: int
    kind: Literal["restart", "rewind", "lr_change"]
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


class StepIn(BaseModel):
    """The values logged at one step; ``time`` is the trainer's wall clock (Unix seconds)."""

    model_config = ConfigDict(extra="forbid")

    step: Step
    time: float | None = None
    values: dict[MetricName, float]


class BatchIn(BaseModel):
    """One ingest request: a client-chosen ``batch_id`` makes replays harmless."""

    model_config = ConfigDict(extra="forbid")

    batch_id: BatchId
    steps: list[StepIn]


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

    acknowledged: bool | None = None
    status: Literal["resolved"] | None = None


class DetectRequest(BaseModel):
    """Re-run the detectors over a stored run (a backtest), optionally with other thresholds."""

    model_config = ConfigDict(extra="forbid")

    thresholds: dict[str, Any] = Field(
        default_factory=dict, description='overrides, e.g. {"entropy_collapse.rho_warn": 0.6}'
    )
    apply: bool = Field(
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


class BatchAck(BaseModel):
    batch_id: str
    duplicate: bool = Field(
        description="true when this batch id was stored before; nothing written"
    )
    points: int = Field(description="points in the batch")
    steps: int
    alerts: list[AlertPublic] = Field(description="alerts opened or escalated by this batch")


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


class ErrorBody(BaseModel):
    """Every refusal: what was wrong and how to fix it (a list of fields for 422)."""

    detail: str | list[dict[str, Any]]


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": meaning}
    for status, meaning in (
        (400, "malformed body: not JSON, bad gzip, contradicting parameters"),
        (401, "no API token, or an unknown or revoked one"),
        (403, "the token's scope is too small"),
        (404, "unknown run, key, alert or token"),
        (409, "the request contradicts what is stored"),
        (413, "above the configured limits"),
        (503, "saturated (see Retry-After) or the database is unavailable"),
    )
}


TokenScope = Literal["read", "write", "admin"]


class TokenCreate(BaseModel):
    name: str = Field(min_length=1, max_length=128, description="who or what holds it")
    scope: TokenScope
    project: str | None = Field(
        default=None,
        max_length=128,
        description="limit the token to this project's runs, alerts and samples; "
        "none: every project",
    )


class TokenPublic(BaseModel):
    id: int
    name: str
    scope: TokenScope
    project: str | None
    created_at: datetime
    revoked_at: datetime | None


class TokenCreated(TokenPublic):
    token: str = Field(description="the secret, shown this once; send it as Authorization: Bearer")


class TokenList(BaseModel):
    data: list[TokenPublic]
    count: int


class WriteLoad(BaseModel):
    """The write gate of the answering process: saturated means new writes get 503."""

    in_flight: int
    limit: int
    saturated: bool
    admitted_total: int
    refused_total: int


class SchemaState(BaseModel):
    """The database's migration revision against the newest this service ships."""

    revision: str | None
    head: str | None
    current: bool


class Health(BaseModel):
    status: Literal["ok"]
    database: str
    latency_ms: float
    version: str
    writes: WriteLoad
    schema_: SchemaState = Field(alias="schema")
    time: float = Field(description="the service's clock (Unix seconds), to check clock skew")

    model_config = ConfigDict(populate_by_name=True)


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


SampleNumber = Annotated[float | None, AfterValidator(_finite_or_none)]
SAMPLE_NUMBER_FIELDS = (
    "reward",
    "advantage",
    "length",
    "truncated",
    "group",
    "logprob",
    "entropy",
    "kl",
)
SAMPLE_TEXT_FIELDS = ("prompt", "response", "reference", "ground_truth")
SampleSplit = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,31}$")]


class SampleTokens(BaseModel):
    """Per-token arrays of one response, all of one length; non-finite numbers are null."""

    model_config = ConfigDict(extra="forbid")

    text: list[str] | None = None
    logprobs: list[SampleNumber] | None = None
    entropy: list[SampleNumber] | None = None
    kl: list[SampleNumber] | None = None
    ratio: list[SampleNumber] | None = None

    @model_validator(mode="after")
    def _same_length(self) -> SampleTokens:
        lengths = {len(v) for v in self.model_dump(exclude_none=True).values()}
        if len(lengths) > 1:
            raise ValueError(
                f"per-token arrays have different lengths {sorted(lengths)}; send one entry per "
                "response token in each"
            )
        return self


class SampleIn(BaseModel):
    """One rollout sample at ``step``; ``index`` tells the samples of a step apart."""

    model_config = ConfigDict(extra="forbid")

    step: Step
    index: Annotated[int, Field(ge=0, le=2**31 - 1)]
    split: SampleSplit = Field(default="train", description='e.g. "train" or "validation"')
    time: float | None = None
    prompt: str | None = None
    response: str | None = None
    reference: str | None = None
    ground_truth: str | None = None
    reward: SampleNumber = None
    advantage: SampleNumber = None
    length: SampleNumber = None
    truncated: SampleNumber = None
    group: SampleNumber = None
    logprob: SampleNumber = None
    entropy: SampleNumber = None
    kl: SampleNumber = None
    scores: dict[MetricName, SampleNumber] = Field(
        default_factory=dict, max_length=64, description="more numbers, e.g. reward components"
    )
    tokens: SampleTokens | None = None
    cut: bool = Field(default=False, description="the hook cut text or tokens to its budget")


class SampleBatchIn(BaseModel):
    """One sample ingest request; a client-chosen ``batch_id`` makes replays harmless."""

    model_config = ConfigDict(extra="forbid")

    batch_id: BatchId
    samples: list[SampleIn]


class SampleAck(BaseModel):
    batch_id: str
    duplicate: bool = Field(description="true when this batch id was stored before")
    samples: int = Field(description="samples in the batch")


class SamplePublic(BaseModel):
    run_id: str
    step: int
    index: int
    split: str
    time: float | None
    prompt: str | None
    response: str | None
    reference: str | None
    ground_truth: str | None
    reward: float | None
    advantage: float | None
    length: float | None
    truncated: float | None
    group: float | None
    logprob: float | None
    entropy: float | None
    kl: float | None
    scores: dict[str, float | None]
    cut: bool
    tokens: SampleTokens | None = Field(description="per-token arrays, only with tokens=true")


class SampleStep(BaseModel):
    step: int
    samples: int


class SampleStepList(BaseModel):
    data: list[SampleStep]
    count: int


class SampleList(BaseModel):
    data: list[SamplePublic]
    count: int = Field(description="samples matching the query, before limit/offset")

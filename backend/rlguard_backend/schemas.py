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
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)

RunStatus = Literal["running", "finished", "crashed", "failed"]
RUN_STATUSES: tuple[str, ...] = ("running", "finished", "crashed", "failed")
Severity = Literal["info", "warn", "critical"]
AlertStatus = Literal["open", "resolved"]

MAX_JSON_DEPTH = 32  # nesting of a run's config and summary
MAX_SAMPLE_TEXT_CHARS = 1024 * 1024  # each text of a sample (the hook sends 32 KiB at most)


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain the NUL character (U+0000); PostgreSQL cannot store it")
    return value


NONFINITE_FROM_WIRE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _wire_number(value: Any, info: ValidationInfo) -> Any:
    """A JSON number, or one of the strings "NaN", "Infinity", "-Infinity". Refused: true and
    false, any other string, and in a JSON body a number too large for a 64-bit float (it
    parses as infinity; an infinite value travels as the string). Python floats validated in
    process may be non-finite."""
    kind = type(value)
    if kind is float:
        if value - value == 0.0 or info.mode == "python":
            return value
        raise ValueError(
            'number out of the range of a 64-bit float; send the string "Infinity" or '
            '"-Infinity" for an infinite value'
        )
    if kind is int:
        return value
    if kind is str and value in NONFINITE_FROM_WIRE:
        return NONFINITE_FROM_WIRE[value]
    raise ValueError('expected a number, or one of the strings "NaN", "Infinity", "-Infinity"')


WIRE_NUMBER_SCHEMA = {"anyOf": [{"type": "number"}, {"enum": list(NONFINITE_FROM_WIRE)}]}


def _integral(value: Any) -> Any:
    """A JSON integer may be written 163.0 (JSON Schema counts it as one); bools and strings
    stay refused by the strict check after this."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


# The AfterValidator words the refusal; the pattern tells schema readers (and fuzzers).
NoNul = Field(json_schema_extra={"pattern": "^[^\\x00]*$"})
NUL_FREE = AfterValidator(_no_nul)
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$"
RunId = Annotated[str, StringConstraints(pattern=RUN_ID_PATTERN)]
Project = Annotated[
    str,
    StringConstraints(min_length=1, max_length=128, strip_whitespace=True),
    NoNul,
    NUL_FREE,
]
Tag = Annotated[str, StringConstraints(min_length=1, max_length=128), NoNul, NUL_FREE]
MetricName = Annotated[str, StringConstraints(min_length=1, max_length=256), NUL_FREE]
BatchId = Annotated[str, StringConstraints(min_length=1, max_length=64), NoNul, NUL_FREE]
RunName = Annotated[str, StringConstraints(max_length=256), NoNul, NUL_FREE]
MAX_STEP = 2**62  # steps are 64-bit integers, with headroom; exact as a float too
Step = Annotated[int, Field(ge=0, le=MAX_STEP)]  # in a query string
# In a JSON body a step is a JSON integer (163.0 too): no bool (false would be a rewind to
# step 0), no fraction, no string.
BodyStep = Annotated[int, Field(ge=0, le=MAX_STEP, strict=True), BeforeValidator(_integral)]
PointValue = Annotated[float, BeforeValidator(_wire_number), WithJsonSchema(WIRE_NUMBER_SCHEMA)]
WallTime = Annotated[float, Field(allow_inf_nan=False, strict=True)]
StrictBool = Annotated[bool, Field(strict=True)]
METRIC_NAME_SCHEMA = {"minLength": 1, "maxLength": 256, "pattern": "^[^\\x00]*$"}


def _numbers_by_name(number: dict[str, Any], most: int | None = None) -> WithJsonSchema:
    """The schema of a dict of metric name -> number (pydantic would put the names'
    pattern in patternProperties)."""
    schema = {"type": "object", "propertyNames": METRIC_NAME_SCHEMA, "additionalProperties": number}
    return WithJsonSchema(schema if most is None else {**schema, "maxProperties": most})


PointValues = Annotated[dict[MetricName, PointValue], _numbers_by_name(WIRE_NUMBER_SCHEMA)]

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


def _shallow(value: dict[str, Any]) -> dict[str, Any]:
    """Refuse JSON nested deeper than MAX_JSON_DEPTH (checked without recursion)."""
    level: list[Any] = [value]
    for _ in range(MAX_JSON_DEPTH):
        level = [
            child
            for item in level
            for child in (item.values() if isinstance(item, dict) else item)
            if isinstance(child, (dict, list))
        ]
        if not level:
            return value
    raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels; flatten it")


FreeJson = Annotated[dict[str, Any], AfterValidator(_shallow), AfterValidator(nonfinite_as_wire)]


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


Count = Annotated[int, Field(ge=0, le=MAX_STEP, strict=True), BeforeValidator(_integral)]


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
    dropped: Dropped = Field(default_factory=Dropped)


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
    name: Annotated[str, NoNul, NUL_FREE] = Field(
        min_length=1, max_length=128, description="who or what holds it"
    )
    scope: TokenScope
    project: Annotated[str, NoNul, NUL_FREE] | None = Field(
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
    """200: the database answered a round trip."""

    status: Literal["ok"]
    ok: Literal[True] = Field(default=True, description="the database answered")
    database: str
    latency_ms: float
    version: str
    writes: WriteLoad
    schema_: SchemaState = Field(alias="schema")
    time: float = Field(description="the service's clock (Unix seconds), to check clock skew")

    model_config = ConfigDict(populate_by_name=True)


class HealthUnavailable(BaseModel):
    """503: the database did not answer; nothing can be stored until it does."""

    detail: str
    status: Literal["unavailable"] = "unavailable"
    ok: Literal[False] = False
    database: str
    version: str
    writes: WriteLoad
    time: float


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _sample_number(value: Any, info: ValidationInfo) -> Any:
    return None if value is None else _wire_number(value, info)


SampleNumber = Annotated[
    float | None,
    BeforeValidator(_sample_number),
    AfterValidator(_finite_or_none),
    WithJsonSchema({"anyOf": [*WIRE_NUMBER_SCHEMA["anyOf"], {"type": "null"}]}),
]
SampleText = Annotated[str, StringConstraints(max_length=MAX_SAMPLE_TEXT_CHARS)]
SampleScores = Annotated[
    dict[MetricName, SampleNumber],
    _numbers_by_name({"anyOf": [*WIRE_NUMBER_SCHEMA["anyOf"], {"type": "null"}]}, 64),
]
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
    """Per-token arrays of one response: every array given holds one entry per response token,
    so all of them have the same length (arrays of different lengths are refused, 422);
    non-finite numbers are null."""

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

    step: BodyStep
    index: Annotated[int, Field(ge=0, le=2**31 - 1, strict=True), BeforeValidator(_integral)]
    split: SampleSplit = Field(default="train", description='e.g. "train" or "validation"')
    time: WallTime | None = None
    prompt: SampleText | None = None
    response: SampleText | None = None
    reference: SampleText | None = None
    ground_truth: SampleText | None = None
    reward: SampleNumber = None
    advantage: SampleNumber = None
    length: SampleNumber = None
    truncated: SampleNumber = None
    group: SampleNumber = None
    logprob: SampleNumber = None
    entropy: SampleNumber = None
    kl: SampleNumber = None
    scores: SampleScores = Field(
        default_factory=dict, max_length=64, description="more numbers, e.g. reward components"
    )
    tokens: SampleTokens | None = None
    cut: StrictBool = Field(default=False, description="the hook cut text or tokens to its budget")


class SampleBatchIn(BaseModel):
    """One sample ingest request; a client-chosen ``batch_id`` makes replays harmless."""

    model_config = ConfigDict(extra="forbid")

    batch_id: BatchId
    samples: list[SampleIn]
    signals_logged: StrictBool = Field(
        default=False,
        description="true when the client logs the steps' samples/* signals itself (the hook "
        "does); else the service derives them from the training samples (docs/detectors-"
        "samples.md)",
    )


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

"""Rollout samples: a batch in (texts, numbers, per-token arrays), as served, and by step."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
)

from rlguard_backend.schemas.wire import (
    MAX_SAMPLE_TEXT_CHARS,
    WIRE_NUMBER_SCHEMA,
    BatchId,
    BodyStep,
    MetricName,
    StrictBool,
    WallTime,
    _numbers_by_name,
    _wire_number,
    integral,
)


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
    """Per-token arrays of one response, entry i of each for the response's token i; non-finite
    numbers are null. Arrays of different lengths are stored as sent: a reader pairs entries by
    position, and a token past an array's end has no value there."""

    model_config = ConfigDict(extra="forbid")

    text: list[str] | None = None
    logprobs: list[SampleNumber] | None = None
    entropy: list[SampleNumber] | None = None
    kl: list[SampleNumber] | None = None
    ratio: list[SampleNumber] | None = None


class SampleIn(BaseModel):
    """One rollout sample at ``step``; ``index`` tells the samples of a step apart."""

    model_config = ConfigDict(extra="forbid")

    step: BodyStep
    index: Annotated[int, Field(ge=0, le=2**31 - 1, strict=True), BeforeValidator(integral)]
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

"""The service's own models: error bodies, API tokens and health."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from rlguard_backend.schemas.wire import NUL_FREE, NoNul


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
        (408, "the request's head or body arrived too slowly"),
        (409, "the request contradicts what is stored"),
        (413, "above the configured limits"),
        (431, "request line and headers above the configured limit"),
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


class TokenAccess(BaseModel):
    """What the token a request carries may do (the dashboard hides what it cannot)."""

    name: str = Field(description="the token's name; 'local (auth off)' without auth")
    scope: TokenScope
    project: str | None = Field(description="the one project it reaches, or none: all")


class TokenList(BaseModel):
    data: list[TokenPublic]
    count: int


class WriteHold(BaseModel):
    """The write holding the write lock longest right now."""

    route: str = Field(description="method and route template, e.g. POST /api/v1/runs")
    run_id: str | None
    held_s: float


class WriteLoad(BaseModel):
    """The write gate of the answering process: saturated means new writes get 503."""

    in_flight: int
    limit: int
    saturated: bool
    admitted_total: int
    refused_total: int
    oldest_s: dict[str, float] = Field(
        default_factory=dict,
        description="per route (method and template), the age in seconds of its oldest write "
        "in flight; a stall shows as an age that keeps growing",
    )
    lock_holder: WriteHold | None = Field(
        default=None, description="the write holding the write lock longest now, if any"
    )
    holds_over_limit_total: int = Field(
        default=0, description="writes that held the lock past RLGUARD_WRITE_HOLD_WARN_S"
    )


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

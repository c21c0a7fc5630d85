"""Request dependencies: access by scope, the database (reads, and writes admitted by the write
gate) and settings.

Each is a coroutine, so resolving it costs no hop to a worker thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Path, Query, Request
from sqlalchemy.orm import Session

from rlguard_backend.core import auth
from rlguard_backend.core.auth import Identity
from rlguard_backend.core.capacity import Database
from rlguard_backend.core.config import Settings
from rlguard_backend.core.errors import Forbidden, Unauthorized
from rlguard_backend.core.stalls import CURRENT_WRITE
from rlguard_backend.models import Run
from rlguard_backend.store import repository


async def get_settings(request: Request) -> Settings:
    """The settings the app was built with."""
    settings: Settings = request.app.state.settings
    return settings


async def get_database(request: Request) -> Database:
    """The app's database, for reads (writes go through ``admit_write``)."""
    database: Database = request.app.state.database
    return database


async def admit_write(request: Request) -> AsyncIterator[Database]:
    """The database for a write, or 503 with ``Retry-After`` at once when too many are in flight.

    The write is registered with its route and run while in flight (``core.stalls``).
    """
    database: Database = request.app.state.database
    database.gate.enter()
    unit = database.writes.admit(_route_of(request), request.path_params.get("run_id"))
    CURRENT_WRITE.set(unit)  # the request's own context: gone with it, no reset needed
    try:
        yield database
    finally:
        database.writes.leave(unit)
        database.gate.leave()


def _route_of(request: Request) -> str:
    """The method and route template, as the client sees it: POST /api/v1/runs/{run_id}/detect.

    FastAPI keeps an included route's own path (without the prefix it was included under).
    """
    prefix: str = request.app.state.settings.api_prefix
    path: str = getattr(request.scope.get("route"), "path", request.url.path)
    return f"{request.method} {path if path.startswith(prefix + '/') else prefix + path}"


# Paging of every list endpoint; an offset past 2^62 would overflow the databases' integers.
Limit = Annotated[int, Query(ge=1, le=1000)]
Offset = Annotated[int, Query(ge=0, le=2**62)]
MAX_ROW_ID = 2**63 - 1  # the largest integer either database stores
AlertId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="the alert's id")]
TokenId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="the token's id")]

SettingsDep = Annotated[Settings, Depends(get_settings)]
DatabaseDep = Annotated[Database, Depends(get_database)]
WriterDep = Annotated[Database, Depends(admit_write)]


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    kind, _, presented = header.partition(" ")
    if kind.lower() != "bearer" or not presented.strip():
        raise Unauthorized(
            "this endpoint needs an API token: send 'Authorization: Bearer <token>' "
            "(create one with `rlguard token create --scope read|write|admin`)"
        )
    return presented.strip()


async def identify(request: Request) -> Identity:
    """Who sent the request: its token's identity, or LOCAL when auth is off."""
    if not request.app.state.auth_required:
        return auth.LOCAL
    presented = _bearer(request)
    cache: auth.TokenCache = request.app.state.token_cache
    identity = cache.get(presented)
    if identity is None:
        database: Database = request.app.state.database
        identity = await database.read(lambda session: auth.check(session, presented))
        if identity is None:
            raise Unauthorized("the API token is unknown or revoked; ask an admin for a new one")
        cache.put(presented, identity)
    return identity


IdentityDep = Annotated[Identity, Depends(identify)]

# Routes about the whole service, which a token limited to one project may not use.
SERVICE_WIDE = ("/v1/tokens", "/v1/webhooks", "/metrics")


def _outside_project(identity: Identity, what: str) -> Forbidden:
    return Forbidden(
        f"token {identity.name!r} is limited to project {identity.project!r}; {what} "
        "needs a token of that project or one for every project"
    )


def project_filter(identity: Identity, project: str | None) -> str | None:
    """The project a list is limited to: the caller's own when its token is limited to one."""
    if identity.project is None:
        return project
    if project is not None and project != identity.project:
        raise _outside_project(identity, f"project {project!r}")
    return identity.project


async def _check_project(request: Request, identity: Identity) -> None:
    """A token limited to a project reaches only that project's runs, alerts and samples."""
    route = request.scope.get("route")
    route_path: str = getattr(route, "path", request.url.path)
    if route_path.startswith(SERVICE_WIDE):
        raise _outside_project(identity, f"{route_path} (the whole service)")
    params = request.path_params
    owner: str | None = params.get("project")
    database: Database = request.app.state.database
    if "run_id" in params:
        run_id = params["run_id"]
        owner = await database.read(lambda session: repository.run_project(session, run_id))
    elif str(params.get("alert_id")).isdigit() and int(params["alert_id"]) <= MAX_ROW_ID:
        alert_id = int(params["alert_id"])
        owner = await database.read(lambda session: repository.alert_project(session, alert_id))
    if owner is not None and owner != identity.project:
        raise _outside_project(identity, "this run or alert of another project")


def _require(scope: auth.Scope) -> Any:
    async def authorize(request: Request, identity: IdentityDep) -> Identity:
        if identity.scope < scope:
            raise Forbidden(
                f"token {identity.name!r} has scope {identity.scope.name}; this endpoint needs "
                f"{scope.name} (or a larger scope)"
            )
        if identity.project is not None:
            await _check_project(request, identity)
        return identity

    authorize.__name__ = f"require_{scope.name}"
    return Depends(authorize)


@dataclass(frozen=True)
class RunRef:
    """The run a read or a command (stop, checkpoint) names: its id or its name, within a
    project when one is given (or the caller's token is limited to one). Other writes name
    runs by id alone."""

    ref: str
    project: str | None

    def resolve(self, session: Session) -> Run:
        """The run, or 404 (no such id or name) or 409 (a name several runs share)."""
        return repository.find_run(session, self.ref, self.project)


async def run_ref(
    identity: IdentityDep,
    run_id: Annotated[str, Path(description="the run's id, or its name")],
    project: Annotated[
        str | None, Query(description="the run's project, to tell apart runs of one name")
    ] = None,
) -> RunRef:
    """The run a read route's ``{run_id}`` names, seen through the caller's token."""
    return RunRef(run_id, project_filter(identity, project))


RunRefDep = Annotated[RunRef, Depends(run_ref)]


async def public() -> None:
    """Marks an endpoint that answers without a token (health checks)."""


# Every API route lists exactly one of these in ``dependencies`` (checked at start-up).
READ = _require(auth.Scope.read)
WRITE = _require(auth.Scope.write)
ADMIN = _require(auth.Scope.admin)
PUBLIC = Depends(public)
ACCESS = {READ: "read", WRITE: "write", ADMIN: "admin", PUBLIC: "public"}

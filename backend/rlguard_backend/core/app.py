"""The FastAPI application factory. Nothing connects at import time: ``create_app`` does."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from sqlalchemy.exc import DataError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Route

from rlguard_backend import __version__
from rlguard_backend.api import (
    alerts,
    commands,
    groups,
    health,
    points,
    policies,
    runs,
    samples,
    series,
    tokens,
    webhooks,
)
from rlguard_backend.api.bodies import exact_integer_bounds, hoist_body_definitions
from rlguard_backend.api.deps import ACCESS
from rlguard_backend.api.links import add_links
from rlguard_backend.core import migrate
from rlguard_backend.core.auth import TokenCache
from rlguard_backend.core.capacity import BodyBudget, Database
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import Checkpointer, make_engine, make_session_factory
from rlguard_backend.core.docs import install_docs
from rlguard_backend.core.errors import ServiceError
from rlguard_backend.core.limits import BodyLimits
from rlguard_backend.core.methods import MethodCheck, MethodTable
from rlguard_backend.core.metrics import ServiceMetrics
from rlguard_backend.core.requestlog import RequestIds
from rlguard_backend.core.stalls import StallWatch
from rlguard_backend.detection.liveness import LivenessWatch
from rlguard_backend.detection.webhooks import WebhookWorker
from rlguard_backend.ingest import InvalidBatch

log = logging.getLogger("rlguard_backend")
# (router, whether it sits under the API prefix)
ROUTERS = (
    (runs.router, True),
    (runs.fields_router, True),
    (groups.router, True),
    (runs.projects, True),
    (points.router, True),
    (series.router, True),
    (samples.router, True),
    (alerts.router, True),
    (commands.router, True),
    (policies.router, True),
    (tokens.router, True),
    (tokens.access_router, True),
    (webhooks.router, True),
    (health.router, True),
    (health.metrics_router, False),
)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service for ``settings``: engine, migrations (unless off), routes, errors."""
    settings = settings or Settings()
    engine = make_engine(
        settings.database_url,
        sqlite_busy_timeout_ms=settings.sqlite_busy_timeout_ms,
        pool_size=settings.db_pool_size,
        sqlite_synchronous=settings.sqlite_synchronous,
    )
    if settings.migrate_on_start:
        migrate.upgrade(engine)

    session_factory = make_session_factory(engine)
    database = Database(
        session_factory,
        read_threads=settings.read_threads,
        write_threads=settings.write_threads,
        max_inflight_writes=settings.max_inflight_writes,
        retry_after_s=settings.retry_after_s,
        write_hold_warn_s=settings.write_hold_warn_s,
    )
    checkpointer = Checkpointer(engine)
    body_budget = BodyBudget(settings.max_inflight_body_bytes, settings.retry_after_s)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        workers: list[WebhookWorker | LivenessWatch | Checkpointer | StallWatch] = [
            LivenessWatch(session_factory, settings),
            checkpointer,
            StallWatch(database.writes),
            WebhookWorker(session_factory, settings),  # hooks may be added over REST any time
        ]
        for worker in workers:
            worker.start()
        async with mcp_running():
            yield
        for worker in workers:
            worker.stop()
        engine.dispose()

    app = FastAPI(
        title="rlguard",
        version=__version__,
        summary="Live stability monitor for RL fine-tuning: KL, clip and entropy.",
        lifespan=lifespan,
        docs_url=None,  # install_docs serves /docs and /redoc without a CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.session_factory = session_factory
    app.state.database = database
    app.state.auth_required = settings.auth == "on"
    app.state.token_cache = TokenCache()
    app.state.metrics = ServiceMetrics()
    app.state.metrics.watch_capacity(database.gate, body_budget, database.writes)
    app.state.body_budget = body_budget
    app.state.schema_head = migrate.head_revision()
    app.state.checkpointer = checkpointer
    for router, prefixed in ROUTERS:
        app.include_router(router, prefix=settings.api_prefix if prefixed else "")
    install_docs(app)
    mcp_running = _mount_mcp(app)
    _install_error_handlers(app, settings)
    app.add_middleware(MethodCheck, table=MethodTable(access_table(settings.api_prefix)))
    app.add_middleware(BodyLimits, settings=settings, budget=body_budget)
    app.add_middleware(RequestIds, log_requests=settings.access_log)
    _resolve_documented_bodies(app)
    return app


def _mount_mcp(app: FastAPI) -> Callable[[], AbstractAsyncContextManager[None]]:
    """``/mcp``: the MCP server (rlguard_backend.mcp.mount), or a 501 naming the extra to
    install; returns what the lifespan runs it in."""
    try:
        from rlguard_backend.mcp.mount import MCP_PATH, McpEndpoint
    except ImportError as exc:
        detail = f"the MCP server needs the mcp package ({exc}): pip install 'rlguard[mcp]'"
        absent = JSONResponse({"detail": detail}, status_code=501)
        app.router.routes.append(Route("/mcp", absent, methods=["GET", "POST", "DELETE"]))
        return nullcontext
    endpoint = McpEndpoint(app, app.state.auth_required, app.state.settings.public_url)
    app.state.mcp = endpoint
    app.router.routes.append(Route(MCP_PATH, endpoint, methods=["GET", "POST", "DELETE"]))
    return endpoint.running


def _resolve_documented_bodies(app: FastAPI) -> None:
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = exact_integer_bounds(hoist_body_definitions(build()))
            app.openapi_schema = add_links(document, app.state.settings.api_prefix)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def access_table(api_prefix: str = "/api") -> dict[tuple[str, str], str]:
    """(method, path) -> the scope each API route declared: read, write, admin or public.

    Raises at start-up for a route that lists none of READ, WRITE, ADMIN, PUBLIC, or several.
    """
    table: dict[tuple[str, str], str] = {}
    for router, prefixed in ROUTERS:
        for route in router.routes:
            assert isinstance(route, APIRoute)
            declared = [ACCESS[d] for d in route.dependencies if d in ACCESS]
            if len(declared) != 1:
                raise RuntimeError(
                    f"{sorted(route.methods or ())} {route.path} must list exactly one of READ, "
                    "WRITE, ADMIN, PUBLIC (rlguard_backend.api.deps) in its dependencies"
                )
            for method in route.methods or ():
                table[(method, (api_prefix if prefixed else "") + route.path)] = declared[0]
    return table


MAX_ERRORS = 20  # listed in one 422; the rest are counted
MAX_LOC_CHARS = 80  # of a key or field named in an error's loc


def _bounded_errors(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A 422's errors, at most MAX_ERRORS, each naming a key of at most MAX_LOC_CHARS: the
    answer to a hostile body stays small whatever the body held."""
    shown = [{**e, "loc": [_short(part) for part in e.get("loc", ())]} for e in errors[:MAX_ERRORS]]
    if len(errors) > MAX_ERRORS:
        more = len(errors) - MAX_ERRORS
        shown.append({"type": "too_many_errors", "loc": [], "msg": f"and {more} more error(s)"})
    return shown


def _short(part: Any) -> Any:
    if isinstance(part, str) and len(part) > MAX_LOC_CHARS:
        return f"{part[:MAX_LOC_CHARS]}…({len(part)} characters)"
    return part


def _install_error_handlers(app: FastAPI, settings: Settings) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)

    @app.exception_handler(ServiceError)
    async def _service_error(_request: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse(
            {"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(InvalidBatch)
    async def _invalid_batch(_request: Request, exc: InvalidBatch) -> JSONResponse:
        return JSONResponse({"detail": _bounded_errors(exc.errors)}, status_code=422)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {k: v for k, v in dict(e).items() if k in ("type", "loc", "msg")} for e in exc.errors()
        ]
        if any(e.get("type") == "json_invalid" for e in errors):
            return JSONResponse({"detail": f"body is not valid JSON: {errors[0]['msg']}"}, 400)
        return JSONResponse({"detail": _bounded_errors(errors)}, status_code=422)

    @app.exception_handler(DataError)
    async def _unstorable_value(_request: Request, exc: DataError) -> JSONResponse:
        # The schemas refuse what they can name (NUL in text, numbers out of range); this is
        # what a query parameter or path may still carry to the database.
        log.info("refused a value the database cannot store: %s", exc.orig)
        detail = f"a value the database cannot store ({exc.orig}); nothing was stored"
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(request: Request, _exc: ClientDisconnect) -> JSONResponse:
        log.info("client left during %s %s before its body arrived", request.method, request.url)
        return JSONResponse({"detail": "client disconnected; nothing was stored"}, 400)

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        detail = f"internal error ({type(exc).__name__}); nothing was stored; see the service log"
        return JSONResponse({"detail": detail}, status_code=500)

    @app.exception_handler(OperationalError)
    async def _database_unavailable(_request: Request, exc: OperationalError) -> JSONResponse:
        log.warning("database error: %s", exc)
        app.state.metrics.database_errors.inc()
        detail = "database unavailable or busy; retry shortly"
        retry = {"Retry-After": str(settings.retry_after_s)}
        return JSONResponse({"detail": detail}, status_code=503, headers=retry)

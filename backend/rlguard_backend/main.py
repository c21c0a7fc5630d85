"""The FastAPI application factory. Nothing connects at import time: ``create_app`` does."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError

from rlguard_backend import __version__, migrate
from rlguard_backend.api import alerts, health, points, runs, samples
from rlguard_backend.config import Settings
from rlguard_backend.db import Checkpointer, make_engine, make_session_factory
from rlguard_backend.errors import ServiceError
from rlguard_backend.ingest import InvalidBatch
from rlguard_backend.liveness import LivenessWatch
from rlguard_backend.webhooks import WebhookWorker

log = logging.getLogger("rlguard_backend")


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service for ``settings``: engine, migrations (unless off), routes, errors."""
    settings = settings or Settings()
    engine = make_engine(
        settings.database_url, sqlite_busy_timeout_ms=settings.sqlite_busy_timeout_ms
    )
    if settings.migrate_on_start:
        migrate.upgrade(engine)

    session_factory = make_session_factory(engine)
    checkpointer = Checkpointer(engine)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        workers: list[WebhookWorker | LivenessWatch | Checkpointer] = [
            LivenessWatch(session_factory, settings),
            checkpointer,
        ]
        if settings.webhooks:
            workers.append(WebhookWorker(session_factory, settings))
        for worker in workers:
            worker.start()
        yield
        for worker in workers:
            worker.stop()
        engine.dispose()

    app = FastAPI(
        title="rlguard",
        version=__version__,
        summary="Live stability monitor for RL fine-tuning: KL, clip and entropy.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.session_factory = session_factory
    app.state.checkpointer = checkpointer
    for router in (runs.router, points.router, samples.router, alerts.router, health.router):
        app.include_router(router, prefix=settings.api_prefix)
    _install_error_handlers(app)
    return app


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service_error(_request: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)

    @app.exception_handler(InvalidBatch)
    async def _invalid_batch(_request: Request, exc: InvalidBatch) -> JSONResponse:
        return JSONResponse({"detail": exc.errors}, status_code=422)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {k: v for k, v in dict(e).items() if k in ("type", "loc", "msg")} for e in exc.errors()
        ]
        if any(e.get("type") == "json_invalid" for e in errors):
            return JSONResponse({"detail": f"body is not valid JSON: {errors[0]['msg']}"}, 400)
        return JSONResponse({"detail": errors}, status_code=422)

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        detail = f"internal error ({type(exc).__name__}); nothing was stored; see the service log"
        return JSONResponse({"detail": detail}, status_code=500)

    @app.exception_handler(OperationalError)
    async def _database_unavailable(_request: Request, exc: OperationalError) -> JSONResponse:
        log.warning("database error: %s", exc)
        detail = "database unavailable or busy; retry shortly"
        return JSONResponse({"detail": detail}, status_code=503)

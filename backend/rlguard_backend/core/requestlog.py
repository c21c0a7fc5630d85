"""Request ids and structured logs: every answer carries ``X-Request-ID``, every log line its id.

A client's own ``X-Request-ID`` (up to 64 of ``[A-Za-z0-9._-]``) is kept, so a trainer's log
and the service's name the same request; otherwise the service makes one. With
``RLGUARD_LOG_FORMAT=json`` each log record is one JSON object per line; with
``RLGUARD_ACCESS_LOG=true`` each request adds one record (method, path, status, milliseconds).
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from contextvars import ContextVar
from typing import Any

REQUEST_ID: ContextVar[str | None] = ContextVar("rlguard_request_id", default=None)
HEADER = b"x-request-id"
VALID_ID = re.compile(rb"^[A-Za-z0-9._-]{1,64}$")
access_log = logging.getLogger("rlguard_backend.access")


class RequestIds:
    """ASGI middleware: the request's id in ``REQUEST_ID`` and in the answer's headers."""

    def __init__(self, app: Any, log_requests: bool = False) -> None:
        self.app = app
        self.log_requests = log_requests

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Give the request an id (the client's own if valid), answer it in a header, log it."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(HEADER, b"")
        request_id = given.decode() if VALID_ID.match(given) else uuid.uuid4().hex
        token = REQUEST_ID.set(request_id)
        started, status = time.perf_counter(), 500

        async def send_with_id(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (HEADER, request_id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if self.log_requests:
                access_log.info(
                    "%s %s %d",
                    scope["method"],
                    scope["path"],
                    status,
                    extra={
                        "method": scope["method"],
                        "path": scope["path"],
                        "status": status,
                        "duration_ms": round((time.perf_counter() - started) * 1000, 3),
                    },
                )
            REQUEST_ID.reset(token)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, request id, extra fields."""

    FIELDS = ("method", "path", "status", "duration_ms")

    def format(self, record: logging.LogRecord) -> str:
        """One log record as one JSON line, with the request id."""
        entry: dict[str, Any] = {
            "time": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": REQUEST_ID.get(),
        }
        entry.update({k: getattr(record, k) for k in self.FIELDS if hasattr(record, k)})
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(log_format: str) -> None:
    """Set up the root logger for a service process: text lines, or JSON lines."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    logging.getLogger("alembic").setLevel(logging.WARNING)

"""What one request may cost before a handler sees it: its connection, its head, its body.

uvicorn bounds neither how long a client may take over its request head nor how large that
head may grow, and FastAPI reads whatever body it is handed. So:

- ``BoundedHttpProtocol`` (uvicorn's httptools protocol, subclassed): the request line and
  headers must arrive within ``request_head_timeout_s`` (408) and fit in
  ``max_request_head_bytes`` (431); at most ``max_connections`` are open at once (503); what
  the HTTP parser cannot read is answered 400. Each refusal is JSON ``{"detail"}`` and closes
  the connection; a connection that never sends a byte is closed after the head timeout.
- ``BodyLimits`` (ASGI middleware): a body must arrive within ``request_body_timeout_s`` of
  its head (408) and fit in ``max_batch_bytes`` for the two ingest endpoints and outside the
  API, ``max_request_bytes`` for every other API endpoint (413), refused as soon as its
  Content-Length, or its bytes so far, pass the limit. All bodies in flight together must
  fit ``max_inflight_body_bytes`` (503 with ``Retry-After``): a request is charged its
  Content-Length when the app first reads its body, before taking in a byte of it (its bytes
  so far when it declares none), and released once it is answered. The batch endpoints read
  their bodies after authentication, so a client without a token cannot take the budget.

What a body costs beyond its bytes while it is parsed is bounded by the write threads, which
alone parse batches: see docs/reliability.md, "Memory".
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from rlguard_backend.core.capacity import BodyBudget
from rlguard_backend.core.config import Settings
from rlguard_backend.core.errors import Saturated

REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}
HEADER_OVERHEAD_BYTES = 4  # ": " and CRLF of each header line


@dataclass(frozen=True)
class ConnectionLimits:
    head_timeout_s: float
    max_head_bytes: int
    max_connections: int
    retry_after_s: int


class HeadTooLarge(Exception):
    """Raised from a parser callback; the parser hands it on as an HttpParserError."""


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline and a size limit on each request head."""

    limits: ConnectionLimits  # set on the subclass protocol_for() makes

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Refuse a connection past ``max_connections`` (503), else start its head deadline."""
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._refusal: tuple[int, str] | None = None
        if len(self.connections) > self.limits.max_connections:
            self._refuse(
                503,
                f"more than {self.limits.max_connections} connections are open; retry "
                "shortly (RLGUARD_MAX_CONNECTIONS)",
            )
            return
        self._await_head()

    def _await_head(self) -> None:
        """Give the next request head ``head_timeout_s`` and ``max_head_bytes``."""
        self._cancel_head_timer()
        self._head_bytes = 0
        self._head_started = False
        self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def data_received(self, data: bytes) -> None:
        """Note that the client has begun its request head, then parse as uvicorn does."""
        if self._head_timer is not None:
            self._head_started = True
        super().data_received(data)

    def on_url(self, url: bytes) -> None:
        """Count the request line against the head limit."""
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        """Count one header line against the head limit."""
        self._count_head(len(name) + len(value) + HEADER_OVERHEAD_BYTES)
        super().on_header(name, value)

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.limits.max_head_bytes:
            self._refusal = (
                431,
                f"request line and headers exceed {self.limits.max_head_bytes} bytes "
                "(RLGUARD_MAX_REQUEST_HEAD_BYTES); send a shorter URL and fewer headers",
            )
            raise HeadTooLarge

    def on_headers_complete(self) -> None:
        """The head is in: its deadline no longer applies."""
        self._cancel_head_timer()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        """Give the next request head on a kept-alive connection its own deadline."""
        super().on_response_complete()
        idle = self.cycle is None or self.cycle.response_complete  # no pipelined request
        if idle and not self.transport.is_closing():
            self._await_head()  # the keep-alive timeout closes a silent connection sooner

    def connection_lost(self, exc: Exception | None) -> None:
        """Drop the head deadline of a closed connection."""
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or (self.cycle and not self.cycle.response_complete):
            return
        if not self._head_started:
            self.transport.close()  # it never said anything: nothing to answer
            return
        self._refuse(
            408,
            f"request head not received within {self.limits.head_timeout_s:g} s "
            "(RLGUARD_REQUEST_HEAD_TIMEOUT_S)",
        )

    def send_400_response(self, msg: str) -> None:
        """Answer what the parser could not read: 431 for a head too large, else 400 (JSON)."""
        status, detail = self._refusal or (400, f"malformed HTTP request ({msg}); send HTTP/1.1")
        self._refuse(status, detail)

    def _refuse(self, status: int, detail: str) -> None:
        """Answer ``status`` with a JSON detail outside any request cycle, and hang up."""
        self._cancel_head_timer()
        body = json.dumps({"detail": detail}).encode()
        head = [f"HTTP/1.1 {status} {REASONS[status]}", "content-type: application/json"]
        head += [f"content-length: {len(body)}", "connection: close"]
        if status == 503:
            head.append(f"retry-after: {self.limits.retry_after_s}")
        self.transport.write("\r\n".join(head).encode() + b"\r\n\r\n" + body)
        self.transport.close()


def protocol_for(settings: Settings) -> type[BoundedHttpProtocol]:
    """The protocol class uvicorn instantiates per connection, with ``settings``' limits."""
    limits = ConnectionLimits(
        head_timeout_s=settings.request_head_timeout_s,
        max_head_bytes=settings.max_request_head_bytes,
        max_connections=settings.max_connections,
        retry_after_s=settings.retry_after_s,
    )
    return type("BoundedHttpProtocol", (BoundedHttpProtocol,), {"limits": limits})


class BodyLimits:
    """ASGI middleware: a deadline and a size limit on every request body, and the process's
    budget of body bytes in flight (``capacity.BodyBudget``)."""

    def __init__(self, app: ASGIApp, settings: Settings, budget: BodyBudget) -> None:
        self.app = app
        self.api_prefix = settings.api_prefix.rstrip("/") + "/"
        self.max_batch_bytes = settings.max_batch_bytes
        self.max_request_bytes = settings.max_request_bytes
        self.timeout_s = settings.request_body_timeout_s
        self.budget = budget

    def limit(self, scope: Scope) -> tuple[int, str]:
        """The body limit of a request and the setting that changes it."""
        path: str = scope["path"]
        ingest = scope["method"] == "POST" and path.endswith(("/batches", "/samples"))
        if ingest or not path.startswith(self.api_prefix):
            return self.max_batch_bytes, "RLGUARD_MAX_BATCH_BYTES"
        return self.max_request_bytes, "RLGUARD_MAX_REQUEST_BYTES"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse an HTTP request's body past its limit or the budget; pass anything else on."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, setting = self.limit(scope)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            detail = f"body of {declared} bytes exceeds the limit of {limit} bytes ({setting})"
            await _refuse(send, 413, detail + "; send less")
            return
        held = BodyHeld(self.budget, declared or 0)
        try:
            await self.app(scope, self._bounded(receive, limit, setting, held), send)
        finally:
            held.release()

    def _bounded(self, receive: Receive, limit: int, setting: str, held: BodyHeld) -> Receive:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        received, done = 0, False

        async def bounded_receive() -> Message:
            nonlocal received, done
            if done:  # the body is in: waiting for a disconnect has no deadline
                return await receive()
            # Charged when the app first reads the body (after authentication for the batch
            # endpoints), all of its Content-Length before a byte of it is taken in.
            held.grow_to(held.declared)
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise HTTPException(
                    408,
                    f"request body not received within {self.timeout_s:g} s "
                    "(RLGUARD_REQUEST_BODY_TIMEOUT_S)",
                    headers={"Connection": "close"},
                ) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                done = not message.get("more_body", False)
                if received > limit:
                    raise HTTPException(
                        413,
                        f"body exceeds the limit of {limit} bytes ({setting}); send less",
                        headers={"Connection": "close"},
                    )
                held.grow_to(received)
            return message

        return bounded_receive


class BodyHeld:
    """What one request holds of the body budget: its Content-Length, or its bytes so far."""

    def __init__(self, budget: BodyBudget, declared: int) -> None:
        self.budget = budget
        self.declared = declared
        self.size = 0

    def charge(self, size: int) -> None:
        """Hold ``size`` bytes more (``Saturated`` when the budget has no room)."""
        self.budget.charge(size)
        self.size += size

    def grow_to(self, received: int) -> None:
        """Hold at least ``received`` bytes; past the budget, 503 and the connection closed."""
        if received <= self.size:
            return
        try:
            self.charge(received - self.size)
        except Saturated as exc:
            raise HTTPException(503, exc.detail, headers={**(exc.headers or {}), **CLOSE}) from None

    def release(self) -> None:
        """Give all of it back (the request was answered)."""
        self.budget.release(self.size)
        self.size = 0


CLOSE = {"Connection": "close"}


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

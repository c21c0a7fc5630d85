"""``/mcp`` on the service: the MCP server over streamable HTTP (stateless, JSON answers).

The door takes any valid API token, as every read endpoint does (none when auth is off); each
tool then calls the REST API in process with the caller's own ``Authorization`` header, so
scopes and project limits are those of REST: a read token's ``stop_run`` gets the REST 403.
Answers link to the run page at ``RLGUARD_PUBLIC_URL``; under ``rlguard up`` without it, at the
address the dashboard beside it listens on.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from rlguard_backend.api.deps import identify
from rlguard_backend.core.errors import ServiceError
from rlguard_backend.mcp.rest import Service
from rlguard_backend.mcp.server import build_server

MCP_PATH = "/mcp"
IN_PROCESS_URL = "http://rlguard.in-process"  # never resolved: the transport is the app itself
LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


class McpEndpoint:
    """The ASGI app behind ``/mcp``; ``running()`` must wrap the service's lifespan."""

    def __init__(self, app: Any, auth_required: bool, public_url: str) -> None:
        self.service = Service(
            IN_PROCESS_URL, transport=httpx.ASGITransport(app=app), public_url=public_url
        )
        self.server = build_server(self.service)
        self.server.streamable_http_app(
            stateless_http=True, json_response=True, transport_security=_security(auth_required)
        )
        self.manager = self.server.session_manager

    def running(self) -> AbstractAsyncContextManager[None]:
        """The session manager's task group, for the service's lifespan."""
        return self.manager.run()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse a missing or unknown token as REST does, then serve the MCP request."""
        try:
            await identify(Request(scope, receive))
        except ServiceError as exc:
            refusal = JSONResponse({"detail": exc.detail}, exc.status_code, headers=exc.headers)
            await refusal(scope, receive, send)
            return
        await self.manager.handle_request(scope, receive, send)


def _security(auth_required: bool) -> TransportSecuritySettings:
    """With auth off (loopback only) browsers' DNS-rebinding is the risk: loopback hosts only.
    With auth on every call carries a token, and the service may answer any host name."""
    if auth_required:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=LOOPBACK_HOSTS,
        allowed_origins=LOOPBACK_ORIGINS,
    )

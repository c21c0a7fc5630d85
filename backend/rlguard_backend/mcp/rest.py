"""The tools' one way to the data: the service's REST API, called with the caller's token.

Over stdio that is the token ``rlguard mcp`` was given; over HTTP the bearer token the MCP
request carried, so each tool call is checked by the REST endpoint it calls exactly as a REST
call of that token would be (scope and project). A refusal becomes a ``ToolError`` whose
message is the service's own ``detail`` with the fix.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from mcp.server.mcpserver.exceptions import ToolError

from rlguard.protocol import run_page_url

API_PATH = "/api/v1"
TIMEOUT_S = 30.0
MAX_DETAIL_CHARS = 600
FIXES = {
    401: "pass a valid token (rlguard mcp --token, RLGUARD_TOKEN, or the Authorization header)",
    403: "this needs a token with a larger scope or of the run's project; an admin makes one "
    "with `rlguard token create --scope write`",
}


@dataclass
class Service:
    """Where the tools send REST calls: a base URL and, for the mounted server, the app itself;
    and where their answers link to: the dashboard's address (empty: no links)."""

    url: str  # the service's root, e.g. http://127.0.0.1:8000
    token: str | None = None  # stdio: the token the command was given
    transport: httpx.AsyncBaseTransport | None = None  # mounted: the app, called in process
    public_url: str = ""  # where readers open the dashboard, e.g. https://rlguard.example.com

    def link(
        self, run_id: str, first_step: int | None = None, last_step: int | None = None
    ) -> str | None:
        """The run page, zoomed on the steps when given; None without a dashboard address."""
        if not self.public_url:
            return None
        return run_page_url(self.public_url, run_id, first_step, last_step)

    def client(self, headers: Mapping[str, str] | None) -> Rest:
        """A REST client for one tool call; ``headers`` are the MCP request's (None on stdio)."""
        authorization = (headers or {}).get("authorization")
        if authorization is None and self.token:
            authorization = f"Bearer {self.token}"
        return Rest(self, {"Authorization": authorization} if authorization else {})


class Rest:
    """GET and POST on the API with one token; errors as ``ToolError`` naming the fix."""

    def __init__(self, service: Service, headers: dict[str, str]) -> None:
        self.service, self.headers = service, headers
        self.link = service.link

    async def get(self, path: str, **params: Any) -> Any:
        """The JSON answer of ``GET /api/v1{path}``; list values repeat their parameter."""
        return await self._send("GET", path, params=_query(params))

    async def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        """The JSON answer of ``POST /api/v1{path}``."""
        return await self._send("POST", path, json=body)

    async def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        url = self.service.url.rstrip("/") + API_PATH + path
        try:
            async with httpx.AsyncClient(
                transport=self.service.transport, headers=self.headers, timeout=TIMEOUT_S
            ) as http:
                answer = await http.request(method, url, **kwargs)
        except httpx.HTTPError as exc:
            raise ToolError(
                f"cannot reach the rlguard service at {self.service.url}: {exc}"
            ) from exc
        if answer.is_success:
            return answer.json()
        raise ToolError(_refusal(method, path, answer))


def quote(segment: str) -> str:
    """``segment`` (a run id) made safe as one path segment."""
    return urllib.parse.quote(segment, safe="")


def _query(params: dict[str, Any]) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for name, value in params.items():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if item is not None:
                pairs.append((name, str(item).lower() if isinstance(item, bool) else str(item)))
    return pairs


def _refusal(method: str, path: str, answer: httpx.Response) -> str:
    try:
        detail = answer.json().get("detail", answer.text)
    except ValueError:
        detail = answer.text
    text = detail if isinstance(detail, str) else str(detail)
    message = f"{method} {API_PATH}{path} answered {answer.status_code}: {text[:MAX_DETAIL_CHARS]}"
    fix = FIXES.get(answer.status_code)
    return f"{message} ({fix})" if fix else message

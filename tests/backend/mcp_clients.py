"""The official mcp package's own client over both transports, for the MCP tests."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

TOOLS = {
    "list_runs",
    "run_health",
    "get_series",
    "compare_runs",
    "get_samples",
    "incident",
    "stop_run",
    "checkpoint_run",
}
TIMEOUT_S = 120


@dataclass
class Answer:
    """One tool call's result: whether it is an error, and its text (JSON when not)."""

    is_error: bool
    text: str

    @property
    def data(self) -> Any:
        assert not self.is_error, self.text
        return json.loads(self.text)


async def call(session: ClientSession, tool: str, **arguments: Any) -> Answer:
    """Call ``tool`` and return its single text answer."""
    result = await session.call_tool(tool, arguments)
    (content,) = result.content
    assert content.type == "text"
    return Answer(bool(result.is_error), content.text)


@asynccontextmanager
async def http_session(service_url: str, token: str | None) -> AsyncIterator[ClientSession]:
    """A session with the service's ``/mcp`` over streamable HTTP, sending ``token``."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=TIMEOUT_S) as http,
        streamable_http_client(f"{service_url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def stdio_session(service_url: str, token: str | None) -> AsyncIterator[ClientSession]:
    """A session with a real ``rlguard mcp`` subprocess pointed at the service."""
    ours = ("RLGUARD_TOKEN", "RLGUARD_URL", "RLGUARD_PUBLIC_URL")
    env = {k: v for k, v in os.environ.items() if k not in ours}
    args = ["-m", "rlguard", "mcp", "--url", service_url]
    params = StdioServerParameters(
        command=sys.executable, args=[*args, *(["--token", token] if token else [])], env=env
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


Scenario = Callable[[ClientSession], Coroutine[Any, Any, None]]
SESSIONS = {"http": http_session, "stdio": stdio_session}


def run_with(transport: str, service_url: str, token: str | None, scenario: Scenario) -> None:
    """Run ``scenario`` against a session over ``transport`` (http or stdio), within TIMEOUT_S."""

    async def main() -> None:
        with anyio.fail_after(TIMEOUT_S):
            async with SESSIONS[transport](service_url, token) as session:
                await scenario(session)

    # In a thread of its own: a session-scoped browser (Playwright's sync API) may hold an event
    # loop running in this test process's main thread.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(anyio.run, main).result()

"""The methods each route path takes, answered before routing: any other method gets 405 with
``Allow``, ``OPTIONS`` gets 204 with ``Allow``.

Done once for every route the service declares, ahead of the router, so that nothing routed
later answers in their stead: ``rlguard up`` adds a catch-all JSON 404 under the API prefix and
mounts the dashboard at ``/``, which had answered ``PUT`` with 404 and ``OPTIONS`` with the
dashboard's ``Allow: HEAD, GET, OPTIONS`` whatever the API path took.

>>> table = MethodTable([("GET", "/v1/runs/{run_id}"), ("PATCH", "/v1/runs/{run_id}")])
>>> sorted(table.allowed("/v1/runs/a1")), table.allowed("/v1/runs/a1/keys")
(['GET', 'PATCH'], None)
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send


class MethodTable:
    """Route paths (templates such as ``/v1/runs/{run_id}``) with the methods each takes."""

    def __init__(self, routes: Iterable[tuple[str, str]]) -> None:
        by_path: dict[str, set[str]] = {}
        for method, path in routes:
            by_path.setdefault(path, set()).add(method)
        self._fixed = {path: frozenset(m) for path, m in by_path.items() if "{" not in path}
        self._templated = [
            (re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$"), frozenset(m))
            for path, m in by_path.items()
            if "{" in path
        ]

    def allowed(self, path: str) -> frozenset[str] | None:
        """The methods the routes at ``path`` take, or None when no route has that path."""
        found = self._fixed.get(path)
        for pattern, methods in self._templated:
            if pattern.match(path):
                found = methods if found is None else found | methods
        return found


def allow_header(methods: Iterable[str]) -> str:
    """The ``Allow`` value: the route's methods and OPTIONS, sorted."""
    return ", ".join(sorted({*methods, "OPTIONS"}))


class MethodCheck:
    """ASGI middleware: 405 with ``Allow`` for a method no route at the path takes, 204 with
    ``Allow`` for ``OPTIONS``; every other request goes on to the app."""

    def __init__(self, app: ASGIApp, table: MethodTable) -> None:
        self.app = app
        self.table = table

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a method the path's routes do not take; pass anything else on."""
        if scope["type"] == "http":
            allowed = self.table.allowed(scope["path"])
            if allowed is not None and scope["method"] not in allowed:
                await self._answer(scope["method"], allowed)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    @staticmethod
    def _answer(method: str, allowed: frozenset[str]) -> Response:
        headers = {"Allow": allow_header(allowed)}
        if method == "OPTIONS":
            return Response(status_code=204, headers=headers)
        detail = f"this path does not take {method}; it takes {headers['Allow']}"
        return JSONResponse({"detail": detail}, status_code=405, headers=headers)

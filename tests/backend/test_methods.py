"""Methods a path does not take: 405 with ``Allow``, and ``OPTIONS`` 204 with ``Allow``, on every
route, as ``rlguard up`` serves them (beside its catch-all API 404 and the dashboard at ``/``)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from rlguard_backend.core.app import access_table
from rlguard_backend.core.config import Settings
from rlguard_backend.core.methods import MethodTable
from rlguard_compose import start_background

ROUTES = access_table("/api")
METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE"}
PATHS = sorted({path for _, path in ROUTES})


def _allowed(path: str) -> set[str]:
    return {method for method, route in ROUTES if route == path}


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    database = tmp_path_factory.mktemp("methods") / "up.db"
    server = start_background(settings=Settings(database_url=f"sqlite:///{database}"))
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        server.stop()
        server.app.state.engine.dispose()


@pytest.mark.parametrize("path", PATHS)
def test_methods_options_and_undeclared_methods_name_the_declared_ones(
    http: httpx.Client, path: str
) -> None:
    concrete = re.sub(r"\{[^}]+\}", "7", path)
    allow = ", ".join(sorted(_allowed(path) | {"OPTIONS"}))
    options = http.options(concrete)
    assert (options.status_code, options.headers["allow"], options.content) == (204, allow, b"")
    for method in sorted(METHODS - _allowed(path)):
        answer = http.request(method, concrete)
        assert (answer.status_code, answer.headers["allow"]) == (405, allow), (method, path)
        assert answer.json()["detail"] == f"this path does not take {method}; it takes {allow}"


def test_methods_other_paths_reach_the_catch_all_and_the_dashboard(http: httpx.Client) -> None:
    unknown = http.put("/api/v1/no-such-thing")
    assert unknown.status_code == 404 and "no API endpoint" in unknown.json()["detail"]
    assert http.get("/").status_code == 200
    assert http.get("/api/v1/runs").status_code == 200


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/runs", {"GET", "POST"}),
        ("/v1/runs/a1", {"GET", "PATCH"}),
        ("/v1/runs/a1/keys", {"GET"}),
        ("/v1/runs/", None),
        ("/v1/runs/a/b/keys", None),
        ("/v2/runs", None),
    ],
)
def test_methods_table_matches_whole_segments(path: str, expected: set[str] | None) -> None:
    routes = [("GET", "/v1/runs"), ("POST", "/v1/runs"), ("GET", "/v1/runs/{run_id}")]
    routes += [("PATCH", "/v1/runs/{run_id}"), ("GET", "/v1/runs/{run_id}/keys")]
    table = MethodTable(routes)
    found = table.allowed(path)
    assert (set(found) if found is not None else None) == expected

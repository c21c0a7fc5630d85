"""Schema-driven fuzzing of the whole OpenAPI surface with schemathesis, over real HTTP: no 5xx,
every status and body as the document says, with auth off and with each token scope."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from rlguard_backend import auth
from rlguard_backend.config import Settings
from rlguard_backend.db import write_session
from rlguard_backend.main import create_app
from rlguard_backend.serve import ServerThread

CHECKS = ",".join(
    (
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "response_headers_conformance",
    )
)


@pytest.fixture(params=["off", "read", "write", "admin"])
def target(request: pytest.FixtureRequest, sqlite_url: str) -> Iterator[tuple[str, list[str]]]:
    scope = request.param
    app = create_app(Settings(database_url=sqlite_url, auth="off" if scope == "off" else "on"))
    headers: list[str] = []
    if scope != "off":
        with write_session(app.state.session_factory) as session:
            token = auth.issue(session, f"fuzz-{scope}", auth.Scope[scope])[1]
            session.commit()
        headers = ["-H", f"Authorization: Bearer {token}"]
    with ServerThread(app) as server:
        yield server.url, headers
    app.state.engine.dispose()


def test_fuzz_openapi_surface_answers_as_documented(target: tuple[str, list[Any]]) -> None:
    url, headers = target
    binary = shutil.which("schemathesis", path=str(sys.prefix) + "/bin") or "schemathesis"
    options = ["--checks", CHECKS, "--max-examples", "8", "--seed", "7", "-n", "1", "--no-color"]
    result = subprocess.run(
        [binary, "run", f"{url}/openapi.json", *options, *headers],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:]
    assert " passed" in result.stdout

"""Schema-driven fuzzing of the whole OpenAPI surface with schemathesis, over real HTTP: no 5xx,
every status, header and body as the document says, with auth off and with each token scope
(read, write, admin, and an admin token limited to one project).

The document is loaded once, and each generated case goes to every scope in turn: generating
the cases (every parameter's boundary and malformed values, then 4 fuzzed ones an operation) is
most of schemathesis's cost, and they are the same for every scope. A stateful run then chains
operations (create a run, log to it, read it back) on the service without auth."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from schemathesis.config import SchemathesisConfig

from rlguard_backend.core import auth
from rlguard_backend.core.app import create_app
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import write_session
from rlguard_backend.core.serve import ServerThread

MAX_EXAMPLES = 4  # fuzzed cases an operation, beside every boundary and malformed value
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
)
CONFIG = f"""
seed = 7
[phases]
examples.enabled = true
coverage.enabled = true
fuzzing.enabled = true
[generation]
max-examples = {MAX_EXAMPLES}
[checks]
enabled = false
{"".join(f"{check}.enabled = true{chr(10)}" for check in CHECKS)}"""
Target = tuple[str, dict[str, str]]  # a base URL and the headers that carry the scope's token


def _document() -> dict[str, Any]:
    """The service's OpenAPI document, from an app that is built but never serves or connects."""
    app = create_app(Settings(database_url="sqlite://", migrate_on_start=False))
    app.state.engine.dispose()
    return app.openapi()


schema = schemathesis.openapi.from_dict(_document(), config=SchemathesisConfig.from_str(CONFIG))


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    """Each scope's target: auth off on one service, each token on a second one (auth on)."""
    folder = tmp_path_factory.mktemp("fuzz")
    unguarded = create_app(Settings(database_url=f"sqlite:///{folder / 'off.db'}", auth="off"))
    guarded = create_app(Settings(database_url=f"sqlite:///{folder / 'on.db'}", auth="on"))
    with write_session(guarded.state.session_factory) as session:
        tokens = {s.name: auth.issue(session, f"fuzz-{s.name}", s)[1] for s in auth.Scope}
        tokens["project"] = auth.issue(session, "fuzz-project", auth.Scope.admin, "fuzz")[1]
        session.commit()
    with ServerThread(unguarded) as open_server, ServerThread(guarded) as guarded_server:
        scoped = {
            scope: (guarded_server.url, {"Authorization": f"Bearer {token}"})
            for scope, token in tokens.items()
        }
        yield {"off": (open_server.url, {}), **scoped}
    for app in (unguarded, guarded):
        app.state.engine.dispose()


@schema.parametrize()
def test_fuzz_openapi_surface_answers_as_documented_in_every_scope(
    case: schemathesis.Case, targets: dict[str, Target]
) -> None:
    for url, headers in targets.values():
        case.call_and_validate(base_url=url, headers=headers)


def test_fuzz_stateful_sequences_answer_as_documented(targets: dict[str, Target]) -> None:
    """Chains of operations linked by what they return (schemathesis's stateful phase, run by
    its CLI, which replays them against a service whose state moves on)."""
    url = targets["off"][0]
    binary = shutil.which("schemathesis", path=str(sys.prefix) + "/bin") or "schemathesis"
    options = [
        "--phases",
        "stateful",
        "--checks",
        ",".join(CHECKS),
        "--max-examples",
        str(MAX_EXAMPLES),
    ]
    result = subprocess.run(
        [binary, "run", f"{url}/openapi.json", *options, "--seed", "7", "-w", "1", "--no-color"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:]
    assert " passed" in result.stdout

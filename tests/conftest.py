"""Shared fixtures: real SQLite files, real PostgreSQL databases, real uvicorn servers.

- ``sqlite_url``: a fresh SQLite file per test.
- ``pg_url``: a fresh database on the local PostgreSQL server per test (created from a migrated
  template, dropped at the end of the session). PostgreSQL must be reachable: the suite fails,
  never skips, without it.
- ``db_url``: parametrised over both.
- ``app`` / ``client``: the FastAPI app on ``db_url`` and an in-process client.
- ``server``: that app served by a real uvicorn on 127.0.0.1:0 in a thread (``.url``,
  ``.session_factory``).
- ``demo_runs``: demo runs trained once per session, shared by the test files that read the
  same preset and seed (``tests/demo/demo_runs.py``).

``make test`` runs the suite on two pytest-xdist workers, a whole file to a worker (the files
that share ``demo_runs`` go together): see ``pytest_xdist_make_scheduler``.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from rlguard_backend.core import migrate
from rlguard_backend.core.app import create_app
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import make_engine
from rlguard_backend.core.serve import ServerThread

PG_ADMIN_DSN = os.environ.get(
    "RLGUARD_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
# Torch (and any OpenMP library) on one thread in the test process and the processes it starts,
# unless asked otherwise: on two cores shared with other work, two threads spin against each
# other (three 2-step demo runs took 186 s at load 15, 19 s on one thread). The demo's training
# pools set one thread per worker already.
os.environ.setdefault("OMP_NUM_THREADS", "1")


# The files that read the session's demo runs: one xdist work unit, so they train once.
DEMO_RUN_FILES = frozenset(
    {"test_demo_alerts.py", "test_demo_presets.py", "test_demo_alert_pictures.py"}
)
# Folders whose files take longest (training, benchmark runs, service kills): handed out first,
# so that no worker is left with one of them at the end while the other idles.
LONGEST_FIRST = ("tests/demo/", "tests/benchmarks/", "tests/reliability/")


def _work_unit(nodeid: str) -> str:
    """The xdist work unit of a test: its file, or the demo-run files together."""
    path = nodeid.split("::", 1)[0]
    return "demo_runs" if path.rpartition("/")[2] in DEMO_RUN_FILES else path


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Whole work units to a worker, as ``--dist loadfile`` hands out whole files: module
    fixtures are built once, and the demo runs train once."""
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnitScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    return WorkUnitScheduling(config, log)


def _name_node_id_after_its_name(item: pytest.Item) -> None:
    """schemathesis names each operation's test "test[GET /path]" but gives them all the test
    function's node id, and xdist hands tests out by node id (33 operations would run as 1)."""
    nodeid = f"{item.nodeid.rpartition('::')[0]}::{item.name}"
    if hasattr(item, "_id"):  # pytest 9 keeps it structured
        from _pytest.nodeid import coerce_node_id

        item._id = coerce_node_id(nodeid)
    else:
        item._nodeid = nodeid


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test a node id of its own, and the longest folders first."""
    for item in items:
        if "[" in item.name and not item.nodeid.endswith("]"):
            _name_node_id_after_its_name(item)
    twice = sorted(nodeid for nodeid, n in Counter(item.nodeid for item in items).items() if n > 1)
    if twice:
        raise pytest.UsageError(f"tests share a node id, so xdist would run them once: {twice}")
    items.sort(key=lambda item: not item.nodeid.startswith(LONGEST_FIRST))


def _pg_admin() -> psycopg.Connection:
    try:
        return psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {PG_ADMIN_DSN} ({exc}); start it with "
            "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` "
            "or `make services`",
            pytrace=False,
        )


def _pg_url(database: str, schema: str | None = None) -> str:
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    options = f"?options=-csearch_path%3D{schema}" if schema else ""
    return f"{base}/{database}{options}"


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A throwaway database for this test session (one schema per test inside it)."""
    name = f"rlguard_test_{uuid.uuid4().hex[:8]}"
    with _pg_admin() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield name
    with _pg_admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _fresh_schema(database: str) -> tuple[str, str]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_pg_url(database).replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return schema, _pg_url(database, schema)


def _drop_schema(database: str, schema: str) -> None:
    with psycopg.connect(_pg_url(database).replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def pg_empty_url(pg_database: str) -> Iterator[str]:
    """A PostgreSQL URL whose search path is a fresh, empty schema (no tables at all)."""
    schema, url = _fresh_schema(pg_database)
    yield url
    _drop_schema(pg_database, schema)


@pytest.fixture
def pg_url(pg_empty_url: str) -> str:
    """A fresh PostgreSQL schema for one test, migrated to head."""
    engine = make_engine(pg_empty_url)
    migrate.upgrade(engine)
    engine.dispose()
    return pg_empty_url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'rlguard.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest) -> str:
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(name))


@pytest.fixture
def settings(db_url: str) -> Settings:
    return Settings(database_url=db_url)


@pytest.fixture
def app(settings: Settings) -> Iterator[Any]:
    application = create_app(settings)
    yield application
    application.state.engine.dispose()


@pytest.fixture
def client(app: Any) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield test_client


@dataclass
class RunningServer:
    url: str
    app: Any
    thread: ServerThread

    @property
    def session_factory(self) -> sessionmaker[Session]:
        factory: sessionmaker[Session] = self.app.state.session_factory
        return factory

    @property
    def engine(self) -> Any:
        return self.app.state.engine


@pytest.fixture
def server(sqlite_url: str) -> Iterator[RunningServer]:
    """The API on a fresh SQLite file, served by a real uvicorn on 127.0.0.1:0."""
    application = create_app(Settings(database_url=sqlite_url))
    with ServerThread(application) as thread:
        yield RunningServer(url=thread.url, app=application, thread=thread)
    application.state.engine.dispose()


@pytest.fixture
def db_server(app: Any) -> Iterator[RunningServer]:
    """The API on ``db_url`` (both databases), served by a real uvicorn."""
    with ServerThread(app) as thread:
        yield RunningServer(url=thread.url, app=app, thread=thread)


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Ignored folder for screenshots and other things a reviewer may want to look at."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def demo_runs() -> Any:
    """The session's demo runs: each (preset, seed) trains once, however many files read it."""
    pytest.importorskip("torch")
    from tests.demo.demo_runs import DemoRuns

    return DemoRuns()


def new_run_id(prefix: str = "run") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"

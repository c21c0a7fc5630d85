"""Shared pieces of the benchmarks: a service subprocess, throwaway databases, statistics."""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

# Shared with the tests, which import nothing from benchmarks/: defined there, used here too.
from tests.support.browser import POLL_MS as POLL_MS
from tests.support.nginx import Nginx as Nginx

PG_ADMIN_DSN = os.environ.get(
    "RLGUARD_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
STARTUP_TIMEOUT_S = 60


@contextlib.contextmanager
def service(database_url: str, *extra_env: tuple[str, str]) -> Iterator[str]:
    """``rlguard server`` (one uvicorn worker) in a subprocess; yields its base URL."""
    with service_process(database_url, *extra_env) as (url, _pid):
        yield url


@contextlib.contextmanager
def service_process(database_url: str, *extra_env: tuple[str, str]) -> Iterator[tuple[str, int]]:
    """``rlguard server`` in a subprocess; yields its base URL and process id."""
    env = {"RLGUARD_DATABASE_URL": database_url, **dict(extra_env)}
    with serving_process(["rlguard", "server", "--port", "0"], env) as started:
        yield started


@contextlib.contextmanager
def serving(args: list[str], env: dict[str, str] | None = None) -> Iterator[str]:
    """``python -m ARGS`` (with ``env`` added to the environment) in a subprocess that prints
    ``listening on URL``; yields the URL."""
    with serving_process(args, env) as (url, _pid):
        yield url


@contextlib.contextmanager
def serving_process(
    args: list[str], env: dict[str, str] | None = None
) -> Iterator[tuple[str, int]]:
    """``python -m ARGS`` in a subprocess that prints ``listening on URL``; yields the URL and
    the process id, and stops the process on exit."""
    process = subprocess.Popen(
        [sys.executable, "-m", *args],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = _announced_url(process, " ".join(args))
        # keep reading its output, or a full pipe would stall the service's logging
        threading.Thread(target=_drain, args=(process,), daemon=True).start()
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def _drain(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    for _line in process.stdout:
        pass


def _announced_url(process: subprocess.Popen[str], command: str) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if "listening on" in line:
            return line.split("listening on ", 1)[1].split()[0]
        if not line and process.poll() is not None:
            break
    raise RuntimeError(f"{command} did not start")


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    """A throwaway PostgreSQL database; yields its SQLAlchemy URL."""
    import psycopg

    name = f"rlguard_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_ADMIN_DSN.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def tree_env(tree: Path | None) -> dict[str, str]:
    """The environment that makes a child process run the service and hook of ``tree`` (a
    checkout of another commit) instead of the installed ones; empty for this checkout."""
    if tree is None:
        return {}
    root = tree.resolve()
    here = Path(__file__).resolve().parents[1]  # the benchmarks themselves stay this tree's
    paths = [root / "trainer_hook", root / "backend", root / "frontend", root / "compose", here]
    return {"PYTHONPATH": os.pathsep.join(str(p) for p in paths)}


def sqlite_url(folder: Path, name: str) -> str:
    return f"sqlite:///{folder / name}"


def summary_ms(samples_s: list[float]) -> dict[str, float]:
    ordered = sorted(samples_s)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(p99 * 1000, 3),
        "n": len(ordered),
    }

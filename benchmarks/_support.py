"""Shared pieces of the benchmarks: a service subprocess, throwaway databases, statistics."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx

PG_ADMIN_DSN = os.environ.get(
    "RLGUARD_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
STARTUP_TIMEOUT_S = 60
# Browser waits poll on a timer, a frame's time apart: requestAnimationFrame (Playwright's
# default) can stop firing on a loaded box and a wait then times out with the page drawn.
POLL_MS = 16
NGINX_CONF = Path(__file__).resolve().parents[1] / "deploy" / "nginx.conf"


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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Nginx:
    """nginx in the foreground on 127.0.0.1, proxying to local backends with the deploy config."""

    def __init__(self, folder: Path, backend_ports: list[int]) -> None:
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.folder = folder
        config = NGINX_CONF.read_text()
        upstream = next(line for line in config.splitlines() if "rlguard:upstreams" in line)
        servers = "\n".join(
            upstream.replace("backend:8000", f"127.0.0.1:{p}") for p in backend_ports
        )
        listen = next(line for line in config.splitlines() if "rlguard:listen" in line)
        config = config.replace(upstream, servers).replace(
            listen, listen.replace("listen 8000", f"listen 127.0.0.1:{self.port}")
        )
        temp = "".join(
            f"    {kind}_temp_path {folder / kind};\n"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        config = "user root;\n" + config.replace("http {\n", "http {\n" + temp, 1)
        (folder / "nginx.conf").write_text(config)
        self.command = [binary, "-p", str(folder), "-c", str(folder / "nginx.conf"), "-e"]
        self.command += ["stderr", "-g", f"daemon off; pid {folder / 'nginx.pid'};"]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = STARTUP_TIMEOUT_S) -> Nginx:
        self.proc = subprocess.Popen(self.command, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while not self._answers():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"nginx did not proxy {self.url}/api/v1/health")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        try:
            return httpx.get(f"{self.url}/api/v1/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)

"""Helpers of the hook tests: real service processes, a fault-injecting HTTP proxy, API reads."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join(str(ROOT / p) for p in ("trainer_hook", "backend", "frontend"))
START_TIMEOUT_S = 60.0


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process: our packages importable, no RLGUARD_* leaking in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLGUARD_")}
    env["PYTHONPATH"] = PYTHONPATH
    env.update(extra)
    return env


def alert_lines(output: str, run_id: str, alert: dict[str, Any]) -> list[str]:
    """The lines of ``output`` where the hook printed ``alert`` (at its stored severity) as it
    opened or escalated: ``rlguard: run <id>: CRITICAL alert <n> (<detector>/<key>, step …``."""
    shown = (
        f"rlguard: run {run_id}: {alert['severity'].upper()} alert {alert['id']} "
        f"({alert['detector']}/{alert['key']}, step "
    )
    return [line for line in output.splitlines() if shown in line]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


class ServiceProcess:
    """``python -m rlguard server`` on a SQLite file (a path) or a database URL, started,
    SIGKILLed and restarted at will."""

    def __init__(self, db: Path | str, port: int = 0, env: dict[str, str] | None = None) -> None:
        self.db_url = db if isinstance(db, str) else f"sqlite:///{db}"
        self.port = port
        self.env = env or {}
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> ServiceProcess:
        cmd = [sys.executable, "-m", "rlguard", "server", "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port)]
        self.proc = subprocess.Popen(
            cmd,
            env=child_env(RLGUARD_DATABASE_URL=self.db_url, **self.env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        self.lines: queue.Queue[str] = queue.Queue()  # what it printed, a line each
        lines = self.lines
        threading.Thread(target=_pump, args=(self.proc, lines), daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        seen: list[str] = []
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            seen.append(line)
            if line.startswith("rlguard listening on "):
                self.url = line.split()[3]
                self.port = urllib.parse.urlsplit(self.url).port or self.port
                return self
        self.kill()
        raise AssertionError("the rlguard server did not start:\n" + "\n".join(seen[-20:]))

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line.strip())


def api(url: str, method: str, path: str, payload: Any = None) -> Any:
    """One JSON request to the service under /api/v1."""
    body = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(
        f"{url}/api/v1{path}",
        data=body,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def stored_series(url: str, run_id: str) -> dict[str, dict[int, Any]]:
    """Every stored point of a run: key -> {step: wire value}."""
    answer = api(url, "GET", f"/runs/{run_id}/series?max_points=100000")
    out: dict[str, dict[int, Any]] = {}
    for key, data in answer["series"].items():
        assert not data["downsampled"], key
        assert len(data["steps"]) == len(set(data["steps"])), f"{key}: a step stored twice"
        out[key] = dict(zip(data["steps"], data["values"], strict=True))
    return out


class FaultProxy:
    """A real HTTP proxy in front of the service that can answer with injected faults.

    ``mode`` is ``"pass"``, ``"status:<code>"`` (answer that status without forwarding),
    ``"close"`` (close the connection without answering), ``"slow:<seconds>"`` or
    ``"json-only"`` (forward every body as JSON, as a service older than the packed points
    body reads it). ``requests``
    records (method, path, answered status) of every request it saw.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = urllib.parse.urlsplit(upstream)
        self.mode = "pass"
        self.inject_alert: dict[str, Any] | None = None  # added to every batch acknowledgement
        self.requests: list[tuple[str, str, int]] = []
        self.times: list[float] = []  # monotonic arrival time of each request
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                status, data = proxy._answer(self.command, self.path, dict(self.headers), body)
                proxy.requests.append((self.command, self.path, status))
                proxy.times.append(time.monotonic())
                if status < 0:
                    self.close_connection = True
                    return
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = _handle

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def _answer(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[int, bytes]:
        mode = self.mode
        if mode.startswith("status:"):
            return int(mode.split(":")[1]), b'{"detail": "injected"}'
        if mode == "close":
            return -1, b""
        if mode.startswith("slow:"):
            time.sleep(float(mode.split(":")[1]))  # the fault itself: a service that is slow
        keep = {
            k: v
            for k, v in headers.items()
            if k.lower() in ("content-type", "content-encoding", "authorization")
        }
        if mode == "json-only" and body is not None:
            keep = {k: v for k, v in keep.items() if k.lower() != "content-type"}
            keep["Content-Type"] = "application/json"
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=keep)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        if self.inject_alert is not None and path.endswith("/batches") and response.status == 200:
            ack = json.loads(data)
            ack["alerts"] = [self.inject_alert]
            data = json.dumps(ack).encode()
        return response.status, data

    def batch_posts(self) -> list[int]:
        return [status for method, path, status in self.requests if path.endswith("/batches")]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def started_run(**kwargs: Any) -> Iterator[Any]:
    import rlguard

    run = rlguard.init(gpu=False, **kwargs)
    try:
        yield run
    finally:
        run.finish(timeout_s=10)

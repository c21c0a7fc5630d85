"""Raw HTTP for the hostile-input tests: requests written byte by byte on a socket, answers
read back with how long they took, and the service's memory and database counted."""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ANSWER_TIMEOUT_S = 30.0
TABLES = ("runs", "metric_keys", "point_chunks", "ingested_batches", "samples", "alerts")


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float

    def json(self) -> Any:
        assert self.headers.get("content-type") == "application/json", self.headers
        return json.loads(self.body)


def request(
    method: str, path: str, body: bytes = b"", headers: dict[str, str | None] | None = None
) -> bytes:
    """One HTTP/1.1 request; Content-Length is the body's unless ``headers`` says otherwise
    (a header given as None is left out)."""
    fields: dict[str, str | None] = {"Host": "127.0.0.1", "Content-Type": "application/json"}
    fields["Content-Length"] = str(len(body))
    fields.update(headers or {})
    lines = "".join(f"{k}: {v}\r\n" for k, v in fields.items() if v is not None)
    return f"{method} {path} HTTP/1.1\r\n{lines}\r\n".encode() + body


def chunked(body: bytes, chunk_bytes: int = 1 << 16) -> bytes:
    """``body`` in Transfer-Encoding: chunked."""
    chunks = [body[i : i + chunk_bytes] for i in range(0, len(body), chunk_bytes)]
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


def exchange(port: int, data: bytes, timeout_s: float = ANSWER_TIMEOUT_S) -> Answer:
    """Send ``data`` on a fresh connection and read one answer (status, headers, body)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)  # it may answer, and close, before reading it all
        received = _read_answer(sock)
    return _parse(received, time.monotonic() - started)


def _read_answer(sock: socket.socket) -> bytes:
    received = b""
    while b"\r\n\r\n" not in received or len(received) < _answer_length(received):
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        received += chunk
    return received


def _answer_length(received: bytes) -> int:
    head, _, _ = received.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(head) + 4 + int(value)
    return len(received)


def _parse(received: bytes, seconds: float) -> Answer:
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.1 "), f"no HTTP answer: {received[:200]!r}"
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Answer(int(lines[0].split()[1]), headers, body, seconds)


def closed_within(sock: socket.socket, timeout_s: float) -> float:
    """Seconds until the service closes ``sock`` (reading and dropping what it sends)."""
    started = time.monotonic()
    sock.settimeout(timeout_s)
    while sock.recv(65536):
        pass
    return time.monotonic() - started


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """A process's resident memory (``VmHWM``: its peak so far) in MiB, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split(f"{field}:")[1].split()[0]) / 1024


def table_counts(database: Path) -> dict[str, int]:
    with sqlite3.connect(database) as connection:
        return {t: connection.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}

"""A real HTTP receiver on 127.0.0.1:0 for webhook tests: it records each POST's headers and
raw body and answers the status it is told to."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WAIT_S = 30


@dataclass
class Received:
    headers: dict[str, str]
    raw: bytes

    @property
    def body(self) -> Any:
        return json.loads(self.raw)


@dataclass
class Receiver:
    """Where messages land: ``url``, what came (``received``), what it answers (``status``)."""

    url: str = ""
    status: int = 200
    answer: bytes = b"ok"
    received: list[Received] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, headers: dict[str, str], raw: bytes) -> tuple[int, bytes]:
        with self._lock:
            self.received.append(Received(headers, raw))
            return self.status, self.answer

    def wait_for(self, count: int, timeout_s: float = WAIT_S) -> list[Received]:
        """The first ``count`` messages, once they came (AssertionError after ``timeout_s``)."""
        wait_until(lambda: len(self.received) >= count, f"{count} message(s) at {self.url}")
        return self.received[:count]


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class _Handler(http.server.BaseHTTPRequestHandler):
    receiver: Receiver

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        status, answer = self.receiver.record(dict(self.headers.items()), raw)
        self.send_response(status)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_args: Any) -> None:
        return


class ReceiverServer:
    """Serve a ``Receiver`` in a thread until ``close()`` (or the ``with`` block ends)."""

    def __init__(self) -> None:
        self.receiver = Receiver()
        handler = type("Handler", (_Handler,), {"receiver": self.receiver})
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.receiver.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def __enter__(self) -> Receiver:
        return self.receiver

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

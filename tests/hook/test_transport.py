"""The hook's HTTP answers, read by ``_transport``: each framing a service or a proxy sends."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import BinaryIO

import pytest

from rlguard._transport import Transport
from rlguard.errors import RetryableError

OK = b'{"ok": 1}'


def _answer(head: str, body: bytes = OK) -> bytes:
    return head.replace("\n", "\r\n").encode() + b"\r\n" + body


SIZED = _answer(f"HTTP/1.1 200 OK\nContent-Length: {len(OK)}\n")


class CannedServer:
    """A real TCP server on 127.0.0.1:0 that answers each request with the next canned bytes and
    closes the connection after those marked ``close``; counts the connections it accepted."""

    def __init__(self, answers: list[tuple[bytes, bool]]) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._answers = answers
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while self._answers:
            connection, _ = self._listener.accept()
            self.connections += 1
            with connection, connection.makefile("rb") as requests:  # type: BinaryIO
                while self._answers and _read_request(requests):
                    answer, close = self._answers.pop(0)
                    connection.sendall(answer)
                    if close:
                        break

    def close(self) -> None:
        self._listener.close()


def _read_request(requests: BinaryIO) -> bool:
    length = 0
    while (line := requests.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    requests.read(length)
    return line == b"\r\n"


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[CannedServer]:
    server = CannedServer(list(request.param))
    yield server
    server.close()


FRAMINGS = {
    "content-length, kept alive": ([(SIZED, False), (SIZED, False)], 1),
    "chunked, with an extension and a trailer": (
        [
            (
                _answer(
                    "HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n",
                    b'4;x=y\r\n{"ok\r\n5\r\n": 1}\r\n0\r\nX-Trailer: 1\r\n\r\n',
                ),
                False,
            ),
            (SIZED, False),
        ],
        1,
    ),
    "HTTP/1.0, the body ending with the connection": (
        [(_answer("HTTP/1.0 200 OK\n"), True), (SIZED, False)],
        2,
    ),
    "an interim 100 before the answer": (
        [(b"HTTP/1.1 100 Continue\r\n\r\n" + SIZED, False), (SIZED, False)],
        1,
    ),
    "connection: close": (
        [
            (_answer(f"HTTP/1.1 200 OK\nConnection: close\nContent-Length: {len(OK)}\n"), True),
            (SIZED, False),
        ],
        2,
    ),
    "an idle keep-alive connection closed by the service": ([(SIZED, True), (SIZED, False)], 2),
}


@pytest.mark.parametrize(
    ("served", "connections"),
    [pytest.param(answers, n, id=name) for name, (answers, n) in FRAMINGS.items()],
    indirect=["served"],
)
def test_transport_reads_each_framing_and_keeps_or_reopens_the_connection(
    served: CannedServer, connections: int
) -> None:
    transport = Transport(served.url)
    assert transport.request("POST", "/runs", b"{}") == {"ok": 1}
    assert transport.request("GET", "/runs") == {"ok": 1}
    transport.close()
    assert served.connections == connections


@pytest.mark.parametrize(
    ("served", "retry_after_s"),
    [
        pytest.param([(b"NOT HTTP\r\n\r\n", True)], None, id="a malformed status line"),
        pytest.param(
            [(_answer("HTTP/1.1 503 Busy\nRetry-After: 7\nContent-Length: 2\n", b"{}"), False)],
            7.0,
            id="503 with Retry-After",
        ),
        pytest.param(
            [(_answer("HTTP/1.1 200 OK\nContent-Length: 50\n"), True)], None, id="a short body"
        ),
        pytest.param(
            [(_answer("HTTP/1.1 200 OK\nContent-Length: -1\n"), True)], None, id="a negative length"
        ),
    ],
    indirect=["served"],
)
def test_transport_answers_it_cannot_use_are_retryable(
    served: CannedServer, retry_after_s: float | None
) -> None:
    transport = Transport(served.url)
    with pytest.raises(RetryableError) as raised:
        transport.request("POST", "/runs/r/batches", b"{}")
    transport.close()
    assert raised.value.retry_after_s == retry_after_s


def test_transport_refuses_a_line_break_in_a_header() -> None:
    transport = Transport("http://127.0.0.1:9", token="abc\r\nX-Injected: 1")
    with pytest.raises(RetryableError, match="control character"):
        transport.request("GET", "/runs")

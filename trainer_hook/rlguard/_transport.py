"""HTTP to the service over the standard library, with errors sorted into retry or give up.

``http.client`` opens the connection (TLS, certificate and host name checks, the timeout); the
request is written in one ``sendall`` and the answer read here (status line, headers, a body
framed by ``Content-Length``, chunked or ending with the connection). Its own response object
parses headers through ``email.parser``: ~0.2–0.3 ms of CPU a request, as much as a whole
sender wake-up's points, where reading them here costs a few µs.
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.parse
from typing import IO, Any, NamedTuple

from rlguard.errors import RejectedError, RetryableError
from rlguard.protocol import PACKED_CONTENT_TYPE, PACKED_MAGIC

API_PREFIX = "/api/v1"
GZIP_MAGIC = b"\x1f\x8b"
# 401/403 are retried: a fixed token or server config must not have lost the spooled batches
RETRYABLE_STATUSES = frozenset({401, 403, 408, 425, 429})
MAX_LINE = 65536  # longest status or header line read, as http.client allows
MAX_HEADERS = 100
# refused as http.client refuses them: a line break in a URL or a token would add a header
_URL_UNSAFE = re.compile("[\x00-\x20\x7f]")
_HEADER_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f]")


STALE_CONNECTION_ERRORS = (
    BrokenPipeError,
    ConnectionResetError,
    ConnectionAbortedError,
    http.client.RemoteDisconnected,
)


class Transport:
    """One keep-alive connection to the service; used by a single thread at a time."""

    def __init__(self, url: str, token: str | None = None, timeout_s: float = 10.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.url = url.rstrip("/")
        self._https = parsed.scheme == "https"
        self._host = parsed.hostname or "127.0.0.1"
        self._port = parsed.port
        self._base_path = parsed.path.rstrip("/")
        host = f"[{self._host}]" if ":" in self._host else self._host
        default_port = 443 if self._https else 80
        self._host_header = host if self._port in (None, default_port) else f"{host}:{self._port}"
        self._timeout_s = timeout_s
        self._headers = {"User-Agent": "rlguard-hook", "Accept-Encoding": "identity"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._connection: http.client.HTTPConnection | None = None
        self._answers: IO[bytes] | None = None  # the connection's buffered reading side

    def __repr__(self) -> str:
        return f"Transport({self.url!r})"

    def close(self) -> None:
        """Close the keep-alive connection; the next request opens a new one."""
        if self._answers is not None:
            self._answers.close()
            self._answers = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _connect(self) -> tuple[http.client.HTTPConnection, IO[bytes]]:
        if self._connection is None or self._answers is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            connection = cls(self._host, self._port, timeout=self._timeout_s)
            self._connection = connection
            connection.connect()
            self._answers = connection.sock.makefile("rb")
        return self._connection, self._answers

    def request(self, method: str, path: str, body: bytes | None = None) -> Any:
        """Send one request under ``/api/v1`` and return the decoded JSON answer; the body's
        type (JSON, gzip JSON or packed points) is told by its first bytes."""
        answer = self._exchange(method, path, body)
        return _decode(method, answer)

    def raw(self, method: str, path: str) -> bytes:
        """The body of a successful non-JSON answer (CSV export)."""
        answer = self._exchange(method, path, None)
        if answer.status >= 300:
            _decode(method, answer)
        return answer.data

    def _exchange(self, method: str, path: str, body: bytes | None) -> Answer:
        headers = dict(self._headers)
        if body is not None:
            headers.update(_content_headers(body))
            headers["Content-Length"] = str(len(body))
        target = f"{self._base_path}{API_PREFIX}{path}"
        reused = self._connection is not None
        try:
            try:
                return self._once(method, target, body, headers)
            except STALE_CONNECTION_ERRORS:
                # The server closed an idle keep-alive connection; every request here is
                # idempotent, so retry once on a fresh connection instead of spooling.
                self.close()
                if not reused:
                    raise
                return self._once(method, target, body, headers)
        except (TimeoutError, OSError, http.client.HTTPException) as exc:
            self.close()
            raise RetryableError(f"{method} {target}: {type(exc).__name__}: {exc}") from exc

    def _once(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> Answer:
        head = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        if _URL_UNSAFE.search(target) or _HEADER_UNSAFE.search("".join(head)):
            raise http.client.InvalidURL(f"a control character in the request to {target!r}")
        request = "\r\n".join([*head, "", ""]).encode("latin-1")
        connection, answers = self._connect()
        connection.sock.sendall(request + body if body is not None else request)
        try:
            status, fields, keep_alive = _read_head(answers)
            data, framed = _read_body(answers, fields, status)
        except ValueError as exc:  # a length or chunk size that is not a number
            raise http.client.HTTPException(f"a malformed answer: {exc}") from exc
        if not (keep_alive and framed):  # the service closes the connection, or it ended the body
            self.close()
        return Answer(status, target, data, _retry_after_s(fields.get("retry-after")))

    def send_json(self, method: str, path: str, payload: dict[str, Any]) -> Any:
        """Send ``payload`` as strict JSON (no NaN) and return the decoded answer."""
        return self.request(method, path, json.dumps(payload, allow_nan=False).encode())

    def create_run(self, payload: dict[str, Any]) -> Any:
        """``POST /runs``: create or resume the run."""
        return self.send_json("POST", "/runs", payload)

    def post_batch(self, run_id: str, body: bytes) -> Any:
        """``POST /runs/{id}/batches`` with a points batch (packed or gzipped JSON)."""
        return self.request("POST", f"/runs/{_quote(run_id)}/batches", body)

    def post_samples(self, run_id: str, body: bytes) -> Any:
        """``POST /runs/{id}/samples`` with a gzipped samples batch."""
        return self.request("POST", f"/runs/{_quote(run_id)}/samples", body)

    def post_kind(self, kind: str, run_id: str, body: bytes) -> Any:
        """Post a batch of ``kind`` (``"p"`` points, ``"s"`` samples)."""
        if kind == "s":
            return self.post_samples(run_id, body)
        return self.post_batch(run_id, body)

    def update_run(self, run_id: str, payload: dict[str, Any]) -> Any:
        """``PATCH /runs/{id}``: status, name or summary."""
        return self.send_json("PATCH", f"/runs/{_quote(run_id)}", payload)

    def heartbeat(self, run_id: str, drops: dict[str, Any] | None = None) -> Any:
        """Liveness; ``drops`` (process, points, steps, samples) reports what was dropped."""
        payload = {} if drops is None else {"drops": drops}
        return self.send_json("POST", f"/runs/{_quote(run_id)}/heartbeat", payload)

    def pending_commands(self, run_id: str) -> Any:
        """``GET /runs/{id}/commands?pending=true``: commands the hook has not received."""
        return self.request("GET", f"/runs/{_quote(run_id)}/commands?pending=true")

    def report_command(self, run_id: str, command_id: int, report: dict[str, Any]) -> Any:
        """``PATCH /runs/{id}/commands/{command_id}``: received, or acted on at a step."""
        return self.send_json("PATCH", f"/runs/{_quote(run_id)}/commands/{command_id}", report)

    def rewind(self, run_id: str, resume_from_step: int) -> Any:
        """``POST /runs/{id}/rewind``: supersede what was stored after ``resume_from_step``."""
        return self.send_json(
            "POST", f"/runs/{_quote(run_id)}/rewind", {"resume_from_step": resume_from_step}
        )


def _read_head(answers: IO[bytes]) -> tuple[int, dict[str, str], bool]:
    """The status, the headers (lower-case names) and whether the connection stays open, of
    the next final answer (1xx interim answers are skipped)."""
    while True:
        line = answers.readline(MAX_LINE + 1)
        if not line:
            raise http.client.RemoteDisconnected("the service closed the connection unanswered")
        version, _, rest = line.rstrip(b"\r\n").partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or not code.isdigit() or len(line) > MAX_LINE:
            raise http.client.BadStatusLine(repr(line[:200]))
        fields = _read_fields(answers)
        if int(code) >= 200:
            break
    connection = fields.get("connection", "").lower()
    if version == b"HTTP/1.0":
        keep_alive = "keep-alive" in connection or "keep-alive" in fields
    else:
        keep_alive = "close" not in connection
    return int(code), fields, keep_alive


def _read_fields(answers: IO[bytes]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = answers.readline(MAX_LINE + 1)
        if line in (b"\r\n", b"\n", b""):
            return fields
        if len(line) > MAX_LINE:
            raise http.client.LineTooLong("header line")
        name, _, value = line.decode("latin-1").partition(":")
        key = name.strip().lower()
        fields[key] = f"{fields[key]}, {value.strip()}" if key in fields else value.strip()
    raise http.client.HTTPException(f"more than {MAX_HEADERS} headers")


def _read_body(answers: IO[bytes], fields: dict[str, str], status: int) -> tuple[bytes, bool]:
    """The answer's body, and False when it was not framed (it ended with the connection)."""
    if status in (204, 304):
        return b"", True
    if "chunked" in fields.get("transfer-encoding", "").lower():
        return _read_chunked(answers), True
    if "content-length" in fields:
        return _read_exactly(answers, int(fields["content-length"])), True
    return answers.read(), False


def _read_chunked(answers: IO[bytes]) -> bytes:
    parts = []
    while size := int(answers.readline(MAX_LINE + 1).split(b";", 1)[0], 16):
        parts.append(_read_exactly(answers, size))
        _read_exactly(answers, 2)  # the chunk's CRLF
    _read_fields(answers)  # trailers, if any, up to the blank line
    return b"".join(parts)


def _read_exactly(answers: IO[bytes], size: int) -> bytes:
    if size < 0:
        raise ValueError(f"a negative length {size}")
    data = answers.read(size)
    if len(data) < size:
        raise http.client.IncompleteRead(data, size - len(data))
    return data


def _content_headers(body: bytes) -> dict[str, str]:
    if body.startswith(GZIP_MAGIC):
        return {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    if body.startswith(PACKED_MAGIC):
        return {"Content-Type": PACKED_CONTENT_TYPE}
    return {"Content-Type": "application/json"}


def _quote(run_id: str) -> str:
    return urllib.parse.quote(run_id, safe="")


class Answer(NamedTuple):
    status: int
    target: str
    data: bytes
    retry_after_s: float | None


def _retry_after_s(header: str | None) -> float | None:
    """``Retry-After`` in seconds (the delay form; an HTTP date is ignored), capped at an hour."""
    try:
        return min(max(float(header), 0.0), 3600.0) if header else None
    except ValueError:
        return None


MAX_DETAIL_CHARS = 1000  # of the service's sentence kept in an error message


def _detail(data: bytes) -> str:
    """The service's own words from an error answer: its ``detail`` sentence, or the ``msg`` of
    each field error; else the first 300 bytes of the body."""
    try:
        detail = json.loads(data).get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, list):
        detail = "; ".join(str(e.get("msg", e)) if isinstance(e, dict) else str(e) for e in detail)
    if isinstance(detail, str):
        return detail[:MAX_DETAIL_CHARS]
    return data[:300].decode("utf-8", "replace")


def _decode(method: str, answer: Answer) -> Any:
    status, target, data = answer.status, answer.target, answer.data
    if status < 300:
        try:
            return json.loads(data) if data else None
        except ValueError as exc:
            raise RetryableError(
                f"{method} {target}: {status} with a body that is not JSON"
            ) from exc
    message = f"{method} {target}: HTTP {status}: {_detail(data)}"
    if status >= 500 or status in RETRYABLE_STATUSES:
        raise RetryableError(message, status, answer.retry_after_s)
    raise RejectedError(message, status)

"""HTTP to the service over the standard library, with errors sorted into retry or give up."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from typing import Any, NamedTuple

from rlguard import _packed
from rlguard.errors import RejectedError, RetryableError

API_PREFIX = "/api/v1"
GZIP_MAGIC = b"\x1f\x8b"
# 401/403 are retried: a fixed token or server config must not have lost the spooled batches
RETRYABLE_STATUSES = frozenset({401, 403, 408, 425, 429})


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
        self._timeout_s = timeout_s
        self._headers = {"User-Agent": "rlguard-hook"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._connection: http.client.HTTPConnection | None = None

    def __repr__(self) -> str:
        return f"Transport({self.url!r})"

    def close(self) -> None:
        """Close the keep-alive connection; the next request opens a new one."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._connection = cls(self._host, self._port, timeout=self._timeout_s)
        return self._connection

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
        connection = self._connect()
        connection.request(method, target, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()
        retry_after_s = _retry_after_s(response.getheader("Retry-After"))
        return Answer(response.status, target, data, retry_after_s)

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

    def heartbeat(self, run_id: str) -> Any:
        """``POST /runs/{id}/heartbeat``: the run is alive."""
        return self.request("POST", f"/runs/{_quote(run_id)}/heartbeat", b"{}")

    def rewind(self, run_id: str, resume_from_step: int) -> Any:
        """``POST /runs/{id}/rewind``: supersede what was stored after ``resume_from_step``."""
        return self.send_json(
            "POST", f"/runs/{_quote(run_id)}/rewind", {"resume_from_step": resume_from_step}
        )


def _content_headers(body: bytes) -> dict[str, str]:
    if body.startswith(GZIP_MAGIC):
        return {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    if body.startswith(_packed.MAGIC):
        return {"Content-Type": _packed.CONTENT_TYPE}
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


def _decode(method: str, answer: Answer) -> Any:
    status, target, data = answer.status, answer.target, answer.data
    if status < 300:
        try:
            return json.loads(data) if data else None
        except ValueError as exc:
            raise RetryableError(
                f"{method} {target}: {status} with a body that is not JSON"
            ) from exc
    detail = data[:300].decode("utf-8", "replace")
    message = f"{method} {target}: HTTP {status}: {detail}"
    if status >= 500 or status in RETRYABLE_STATUSES:
        raise RetryableError(message, status, answer.retry_after_s)
    raise RejectedError(message, status)

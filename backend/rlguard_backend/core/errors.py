"""Service errors. Each maps to one HTTP status and carries a message that says how to fix it.

ServiceError
├── Unauthorized      401  no token, or one that is unknown or revoked
├── Forbidden         403  a token whose scope is too small for the endpoint
├── NotFound          404  unknown run or alert
├── Conflict          409  the request contradicts what is stored
├── PayloadTooLarge   413  batch above the configured limits
├── MalformedRequest  400  body is not gzip / JSON / the expected shape
└── Saturated         503  too many writes in flight; retry after ``Retry-After`` seconds
"""

from __future__ import annotations


class ServiceError(Exception):
    status_code = 500
    headers: dict[str, str] | None = None

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Unauthorized(ServiceError):
    status_code = 401
    headers = {"WWW-Authenticate": "Bearer"}


class Forbidden(ServiceError):
    status_code = 403


class NotFound(ServiceError):
    status_code = 404


class Conflict(ServiceError):
    status_code = 409


class PayloadTooLarge(ServiceError):
    status_code = 413


class MalformedRequest(ServiceError):
    status_code = 400


class Saturated(ServiceError):
    status_code = 503

    def __init__(self, detail: str, retry_after_s: int) -> None:
        super().__init__(detail)
        self.headers = {"Retry-After": str(retry_after_s)}


class InvalidField(ServiceError):
    status_code = 422

    def __init__(self, loc: list[str | int], message: str) -> None:
        super().__init__(message)
        self.detail = [{"type": "value_error", "loc": loc, "msg": message}]  # type: ignore[assignment]


def run_not_found(run_id: str) -> NotFound:
    """404 for an unknown run, naming how to create it."""
    return NotFound(f"run {run_id!r} not found; create it first with POST /api/v1/runs")

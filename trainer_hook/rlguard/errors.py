"""The exceptions rlguard raises or records.

    RLGuardError
    ├── ConfigError (also ValueError)   a bad argument or RLGUARD_* variable; raised by init()
    ├── TransportError                  talking to the service failed; never raised into training
    │   ├── RetryableError              connection refused, timeout, 5xx, 429, 401/403: spool, retry
    │   └── RejectedError               400, 404, 409, 413, 422: the batch goes to the dead letters
    └── SpoolError                      the spool directory cannot be written

Only ``ConfigError`` ever reaches a training loop. Transport errors are caught by the sender
thread, counted in ``run.status()`` and warned about once per cause.
"""

from __future__ import annotations


class RLGuardError(Exception):
    """Base class of every rlguard exception."""


class ConfigError(RLGuardError, ValueError):
    """An argument of ``init()`` or an ``RLGUARD_*`` variable is invalid."""


class TransportError(RLGuardError):
    """A request to the service failed."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RetryableError(TransportError):
    """The service is unreachable, overloaded or refusing us for now: try again later.

    ``retry_after_s`` is the wait the service asked for (its ``Retry-After``), if it said one.
    """

    def __init__(
        self, message: str, status: int | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message, status)
        self.retry_after_s = retry_after_s


class RejectedError(TransportError):
    """The service refused the request itself: sending it again cannot succeed."""


class SpoolError(RLGuardError):
    """The on-disk spool cannot be written; ``disk_full`` when its disk has no room left."""

    def __init__(self, message: str, disk_full: bool = False) -> None:
        super().__init__(message)
        self.disk_full = disk_full

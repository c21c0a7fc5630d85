"""``rlguard doctor``: what a trainer on this machine will meet, checked before a run starts.

The service answers and its database is reachable, its schema is current, this machine's
clock agrees with the service's, the token is accepted with enough scope to write, and the
spool has room. Each check prints one line (``ok``, ``warn`` or ``FAIL`` and what to do); the
exit status is 1 when any check failed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlguard._config import DEFAULT_URL, default_spool_dir
from rlguard._spool import BATCH_SUFFIX

CLOCK_SKEW_WARN_S = 5.0
SPOOL_FREE_WARN_BYTES = 1 << 30
TIMEOUT_S = 10.0
Check = tuple[str, str]  # (level, message)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``rlguard doctor``."""
    parser.add_argument("--url", default=None, help=f"service address (default {DEFAULT_URL})")
    parser.add_argument("--token", default=None, help="API token (default RLGUARD_TOKEN)")
    parser.add_argument("--spool-dir", default=None, help="default RLGUARD_SPOOL_DIR")


def run(args: argparse.Namespace) -> int:
    """Print one line per check with what to do; exit 1 when any check fails."""
    url = (args.url or os.environ.get("RLGUARD_URL") or DEFAULT_URL).rstrip("/")
    token = args.token or os.environ.get("RLGUARD_TOKEN") or None
    spool = Path(args.spool_dir or os.environ.get("RLGUARD_SPOOL_DIR") or default_spool_dir())
    checks = [*service_checks(url, token), *spool_checks(spool)]
    for level, message in checks:
        print(f"{level:4}  {message}")
    return 1 if any(level == "FAIL" for level, _ in checks) else 0


def _get(url: str, path: str, token: str | None, method: str = "GET") -> tuple[int, Any, float]:
    """(status, decoded JSON or None, the server's Date as Unix seconds) of one request."""
    parts = urllib.parse.urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = cls(parts.hostname or "127.0.0.1", parts.port, timeout=TIMEOUT_S)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        connection.request(method, parts.path.rstrip("/") + path, body=b"{}", headers=headers)
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    return response.status, body, time.time()


def service_checks(url: str, token: str | None) -> list[Check]:
    """Service and database reachable, schema current, clocks agreeing, token allowed to write."""
    try:
        status, health, now = _get(url, "/api/v1/health", None)
    except OSError as exc:
        return [("FAIL", f"cannot reach the service at {url} ({exc}); start it (`rlguard up`)")]
    if status != 200 or not isinstance(health, dict):
        return [("FAIL", f"{url}/api/v1/health answered {status}: the database is unreachable")]
    checks: list[Check] = [
        (
            "ok",
            f"service {health['version']} at {url}, {health['database']} database "
            f"({health['latency_ms']:.1f} ms round trip)",
        )
    ]
    checks.append(_schema(health.get("schema") or {}))
    checks.append(_clock(float(health.get("time", now)), now))
    if health.get("writes", {}).get("saturated"):
        checks.append(("warn", "the service is saturated: writes get 503 now (hooks spool)"))
    checks.append(_token(url, token))
    return checks


def _schema(schema: dict[str, Any]) -> Check:
    if schema.get("current"):
        return ("ok", f"schema at {schema.get('revision')}, the newest this service knows")
    return (
        "FAIL",
        f"schema at {schema.get('revision')}, the service expects {schema.get('head')}: run "
        "`rlguard db upgrade` (or the deploy's migrate job)",
    )


def _clock(service_time: float, now: float) -> Check:
    skew = now - service_time
    if abs(skew) > CLOCK_SKEW_WARN_S:
        return (
            "warn",
            f"this machine's clock is {skew:+.1f} s off the service's: wall times of points "
            "will look shifted; sync the clocks (NTP)",
        )
    return ("ok", f"clock within {abs(skew):.1f} s of the service's")


def _token(url: str, token: str | None) -> Check:
    # A heartbeat for a run that does not exist: 404 once the token may write, nothing changed.
    status, body, _ = _get(url, "/api/v1/runs/rlguard-doctor-probe/heartbeat", token, "POST")
    detail = (body or {}).get("detail", "") if isinstance(body, dict) else ""
    outcomes: dict[int, Callable[[], Check]] = {
        404: lambda: ("ok", "token accepted for writing" if token else "no token needed here"),
        401: lambda: ("FAIL", f"token refused: {detail}; set RLGUARD_TOKEN to a write token"),
        403: lambda: ("FAIL", f"token cannot write: {detail}; trainers need the write scope"),
    }
    return outcomes.get(status, lambda: ("FAIL", f"token check answered {status}: {detail}"))()


def spool_checks(spool: Path) -> list[Check]:
    """Room on the spool's disk, whether it can be written, and batches left waiting there."""
    existing = spool
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    level = "warn" if free < SPOOL_FREE_WARN_BYTES else "ok"
    checks: list[Check] = [(level, f"spool {spool}: {free / 2**30:.1f} GiB free on its disk")]
    if not os.access(existing, os.W_OK):
        checks.append(("FAIL", f"spool {spool} cannot be written: set RLGUARD_SPOOL_DIR"))
    pending = list(spool.glob(f"*/*{BATCH_SUFFIX}")) if spool.exists() else []
    if pending:
        checks.append(
            ("warn", f"{len(pending)} spooled batch(es) wait in {spool}: `rlguard sync` sends them")
        )
    return checks

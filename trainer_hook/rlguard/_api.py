"""The read API for notebooks and scripts: runs, full-resolution histories and alerts.

    >>> api = rlguard.Api("http://127.0.0.1:8000", token=None)   # doctest: +SKIP
    >>> api.runs(project="grpo")                                   # doctest: +SKIP
    >>> df = api.history("run-1", ["actor/entropy", "actor/ppo_kl"])  # doctest: +SKIP

A run is named by its id, its name, or ``project/name`` when several projects hold a run of
that name (the service refuses an ambiguous name with 409, listing the runs).

Standard library only until ``history`` is asked for a DataFrame (pandas, imported then).
Errors are the hook's: ``RejectedError`` (404 unknown run, 409 ambiguous name, 401/403 token)
and ``RetryableError`` (unreachable, 5xx), both ``TransportError``.
"""

from __future__ import annotations

import math
import os
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any

from rlguard._config import DEFAULT_URL
from rlguard._transport import Transport
from rlguard.protocol import from_wire

PAGE_LIMIT = 1000  # runs and alerts per request
PAGE_STEPS = 50_000  # steps per history request: below the service's max_points, never bucketed
MAX_POINTS = 100_000


class Api:
    """A client of the REST API; ``url`` and ``token`` default to RLGUARD_URL / RLGUARD_TOKEN."""

    def __init__(
        self, url: str | None = None, token: str | None = None, timeout_s: float = 30.0
    ) -> None:
        self.url = (url or os.environ.get("RLGUARD_URL") or DEFAULT_URL).rstrip("/")
        self._transport = Transport(self.url, token or os.environ.get("RLGUARD_TOKEN"), timeout_s)

    def __repr__(self) -> str:
        return f"Api({self.url!r})"

    def close(self) -> None:
        """Close the HTTP connection (the client reconnects if used again)."""
        self._transport.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _get(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        return self._transport.request("GET", f"{path}?{query}" if query else path)

    def _pages(self, path: str, **params: Any) -> Iterator[dict[str, Any]]:
        offset = 0
        while True:
            page = self._get(path, limit=PAGE_LIMIT, offset=offset, **params)
            yield from page["data"]
            offset += len(page["data"])
            if not page["data"] or offset >= page["count"]:
                return

    def runs(
        self,
        project: str | None = None,
        status: str | None = None,
        tag: str | None = None,
        archived: bool = False,
    ) -> list[dict[str, Any]]:
        """Every run matching the filters (all pages), newest first; ``archived``: those instead."""
        flag = "true" if archived else None
        return list(self._pages("/runs", project=project, status=status, tag=tag, archived=flag))

    def _run_get(self, run: str, below: str = "", **params: Any) -> Any:
        """GET ``/runs/<run>/<below>`` for a run named by id, name or project/name."""
        path, project = run_path(run)
        return self._get(path + below, project=project, **params)

    def run(self, run_id: str) -> dict[str, Any]:
        """One run by id, name or project/name: project, name, status, config, summary, tags."""
        run: dict[str, Any] = self._run_get(run_id)
        return run

    def keys(self, run_id: str) -> list[dict[str, Any]]:
        """The run's metric keys with their point counts and step ranges."""
        keys: list[dict[str, Any]] = self._run_get(run_id, "/keys")["data"]
        return keys

    def alerts(
        self,
        run_id: str | None = None,
        project: str | None = None,
        status: str | None = None,
        severity: str | None = None,
    ) -> list[dict[str, Any]]:
        """Alerts across runs (all pages), with the filters the REST API takes; each names its
        run's ``run_id``, ``run_name`` and ``project``."""
        if run_id is not None and "/" in run_id:
            project, _, run_id = run_id.partition("/")
        return list(
            self._pages("/alerts", run_id=run_id, project=project, status=status, severity=severity)
        )

    def iter_history(
        self,
        run_id: str,
        keys: Sequence[str] | None = None,
        from_step: int = 0,
        to_step: int | None = None,
        page_steps: int = PAGE_STEPS,
    ) -> Iterator[dict[str, Any]]:
        """Rows ``{"step", "time", key: value …}`` in step order, fetched ``page_steps`` at a time.

        Every point at full resolution; a key the run never logged is NaN in every row.
        """
        described = self.keys(run_id)
        names = list(keys) if keys is not None else [k["name"] for k in described]
        last = max((k["last_step"] or 0 for k in described), default=-1)
        end = last if to_step is None else min(to_step, last)
        for lo in range(from_step, end + 1, page_steps):
            yield from self._history_page(run_id, names, lo, min(lo + page_steps - 1, end))

    def _history_page(
        self, run_id: str, names: list[str], lo: int, hi: int
    ) -> Iterator[dict[str, Any]]:
        answer = self._run_get(
            run_id,
            "/series",
            keys=",".join(names),
            from_step=lo,
            to_step=hi,
            max_points=MAX_POINTS,
            include_times="true",
        )
        rows: dict[int, dict[str, Any]] = {}
        for name, data in answer["series"].items():
            times = data.get("times") or [None] * len(data["steps"])
            for step, value, when in zip(data["steps"], data["values"], times, strict=True):
                row = rows.setdefault(step, {"step": step, "time": when})
                row[name] = from_wire(value)
        for step in sorted(rows):
            yield {**{n: math.nan for n in names}, **rows[step]}

    def history(
        self,
        run_id: str,
        keys: Sequence[str] | None = None,
        from_step: int = 0,
        to_step: int | None = None,
        x: str = "step",
    ) -> Any:
        """A pandas DataFrame indexed by ``x`` ("step" or "time"), one column per key."""
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError(
                "Api.history needs pandas: pip install pandas (or use Api.iter_history, "
                "which needs nothing)"
            ) from exc
        if x not in ("step", "time"):
            raise ValueError(f"x={x!r}: use 'step' or 'time'")
        names = list(keys) if keys is not None else None
        rows = list(self.iter_history(run_id, names, from_step, to_step))
        found = sorted({k for row in rows for k in row} - {"step", "time"})
        columns = ["step", "time", *(names if names is not None else found)]
        frame = pd.DataFrame(rows, columns=columns)
        if x == "time":
            frame["time"] = pd.to_datetime(frame["time"], unit="s", utc=True)
        return frame.set_index(x)


def run_path(run: str) -> tuple[str, str | None]:
    """The API path of a run named by id, name or ``project/name``, and the ``project`` query
    parameter that goes with it (a ``/`` cannot ride in the path: servers decode it first).
    The project ends at the first ``/``, so a name may hold more (``grpo/Qwen/Qwen2.5-7B``).

    >>> run_path("grpo/collapse seed0")
    ('/runs/collapse%20seed0', 'grpo')
    """
    project, _, name = run.partition("/") if "/" in run else (None, "", run)
    return f"/runs/{urllib.parse.quote(name, safe='')}", project

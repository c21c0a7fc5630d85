"""The runs grid's server-side rows: AG Grid's requests as ``GET /api/v1/runs`` calls, runs as rows.

The grid (AG Grid's infinite row model) asks for the rows it shows; ``grid_rows`` turns that
request (its block, sort model and filter model) into one list call with ``sort``, ``filter``
and ``fields``, so thousands of runs cost a page of rows each.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from rlguard_backend.schemas import RunRow
from rlguard_frontend import run_state
from rlguard_frontend.api_client import ApiClient, ApiError

PAGE_ROWS = 50
MARKDOWN_SPECIALS = "\\`*_{}[]()#+-.!<>|"
# AG Grid filter types → the API's filter ops
GRID_OPS = {
    "equals": "eq",
    "notEqual": "ne",
    "lessThan": "lt",
    "lessThanOrEqual": "le",
    "greaterThan": "gt",
    "greaterThanOrEqual": "ge",
    "contains": "contains",
    "startsWith": "startswith",
    "blank": "blank",
    "notBlank": "notblank",
}


def api_filters(filter_model: dict[str, Any] | None) -> list[str]:
    """AG Grid's filter model as the API's ``field:op:value`` filters.

    >>> api_filters({"hparam.lr": {"filterType": "number", "type": "inRange",
    ...                            "filter": 1e-6, "filterTo": 3e-6}})
    ['hparam.lr:ge:1e-06', 'hparam.lr:le:3e-06']
    >>> api_filters({"name": {"filterType": "text", "type": "blank"}})
    ['name:blank']
    """
    out: list[str] = []
    for field, model in (filter_model or {}).items():
        for condition in model.get("conditions") or [model]:
            kind = condition.get("type")
            value, upper = condition.get("filter"), condition.get("filterTo")
            if kind == "inRange" and value is not None and upper is not None:
                out += [f"{field}:ge:{value}", f"{field}:le:{upper}"]
            elif kind in ("blank", "notBlank"):
                out.append(f"{field}:{GRID_OPS[kind]}")
            elif kind in GRID_OPS and value is not None:
                out.append(f"{field}:{GRID_OPS[kind]}:{value}")
    return out


def api_sort(sort_model: list[dict[str, Any]] | None) -> list[str]:
    """AG Grid's sort model as the API's sort fields (``-`` for descending)."""
    return [
        ("-" if item.get("sort") == "desc" else "") + str(item["colId"])
        for item in sort_model or []
        if item.get("colId") and item["colId"] != "tags"
    ]


def status_filters(status: str | None, now: datetime | None = None) -> tuple[str | None, list[str]]:
    """The API status and filters for the status picker; stale runs are running but silent."""
    if status != "stale":
        return (status or None), []
    quiet_since = (now or datetime.now(timezone.utc)) - run_state.STALE_AFTER
    return "running", [f"updated_at:lt:{quiet_since.isoformat()}"]


def grid_rows(
    client: ApiClient,
    request: dict[str, Any] | None,
    project: str | None,
    tag: str | None,
    status: str | None,
    columns: list[str] | None,
) -> tuple[dict[str, Any], str, str]:
    """The rows a grid request asks for, the count line and an error (or ``""``)."""
    request = request or {}
    start = int(request.get("startRow") or 0)
    end = int(request.get("endRow") or start + PAGE_ROWS)
    api_status, extra = status_filters(status)
    fields = ["health", *(columns or [])]
    filters = api_filters(request.get("filterModel")) + extra
    try:
        answer = client.list_runs(
            project=project or None,
            status=api_status,
            tag=tag or None,
            limit=max(1, min(1000, end - start)),
            offset=start,
            sort=api_sort(request.get("sortModel")),
            filters=filters,
            fields=fields,
        )
        narrowed = bool(filters or project or tag or status)
        total = client.list_runs(limit=1).count if narrowed else answer.count
    except ApiError as exc:
        return {"rowData": [], "rowCount": 0}, "", str(exc)
    rows = [run_row(run) for run in answer.data]
    return {"rowData": rows, "rowCount": answer.count}, count_text(answer.count, total), ""


def count_text(matching: int, total: int) -> str:
    """``"2,000 runs"``, or ``"37 of 2,000 runs match"`` when filters narrow the list."""
    if matching == total:
        return f"{total:,} run" + ("" if total == 1 else "s")
    return f"{matching:,} of {total:,} runs match"


def _markdown_text(value: str) -> str:
    return "".join(f"\\{c}" if c in MARKDOWN_SPECIALS else c for c in value)


def run_row(run: RunRow) -> dict[str, Any]:
    """A grid row of a listed run: its columns, a link to its page and its computed fields."""
    return {
        **run.values,
        "id": run.id,
        "link": f"[{_markdown_text(run.id)}](/runs/{run.id})",
        "project": run.project,
        "name": run.name or "",
        "status": run_state.display_status(run),
        "tags": ", ".join(run.tags),
        "last_step": run.last_step,
        "age": run_state.age(run.last_heartbeat_at or run.updated_at),
    }

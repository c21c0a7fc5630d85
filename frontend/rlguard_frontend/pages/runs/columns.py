"""The runs grid's columns: the fixed ones, the chosen config and summary fields, their filters.

Pure: the runs page builds its grid and its column pickers from these, and tests call them.
"""

from __future__ import annotations

from typing import Any

from rlguard_backend.schemas import RunFieldPublic
from rlguard_frontend.url_state import RunsState

# Shown unless the viewer picks others: what explains a run's limiters, and how it is doing.
DEFAULT_COLUMNS = (
    "hparam.lr",
    "hparam.kl_coef",
    "hparam.clip_ratio",
    "hparam.kl_placement",
    "last.reward_mean",
    "last.entropy",
    "alerts.open",
)
NUMERIC_HPARAMS = ("hparam.lr", "hparam.kl_coef", "hparam.clip_ratio")
NUMERIC_PREFIXES = ("last.", "alerts.")  # always numbers: their filter is known up front
HEADERS = {
    "hparam.lr": "learning rate",
    "hparam.kl_coef": "β (KL coef)",
    "hparam.clip_ratio": "clip ε",
    "hparam.kl_placement": "KL placement",
    "last.reward_mean": "last reward",
    "last.entropy": "last entropy",
    "alerts.open": "open alerts",
}
TEXT_FILTER = {
    "filter": "agTextColumnFilter",
    "filterParams": {
        "filterOptions": ["contains", "equals", "notEqual", "startsWith", "blank", "notBlank"],
        "maxNumConditions": 1,
        "buttons": ["reset"],
    },
}
NUMBER_FILTER = {
    "filter": "agNumberColumnFilter",
    "filterParams": {
        "filterOptions": [
            "equals",
            "notEqual",
            "lessThan",
            "lessThanOrEqual",
            "greaterThan",
            "greaterThanOrEqual",
            "inRange",
            "blank",
            "notBlank",
        ],
        "maxNumConditions": 1,
        "buttons": ["reset"],
    },
}
# 4 significant digits, as the panels' hover labels show them; text stays text.
NUMBER_FORMAT = {
    "function": "typeof params.value === 'number' ? "
    "String(Number(params.value.toPrecision(4))) : params.value"
}
FIXED_COLUMNS: list[dict[str, Any]] = [
    {
        "headerName": "run",
        "colId": "id",
        "field": "link",
        "cellRenderer": "markdown",
        "pinned": "left",
        "minWidth": 200,
        **TEXT_FILTER,
    },
    {"headerName": "name", "colId": "name", "field": "name", "minWidth": 150, **TEXT_FILTER},
    {"headerName": "project", "colId": "project", "field": "project", **TEXT_FILTER},
    {"headerName": "status", "colId": "status", "field": "status", "filter": False},
    {
        "headerName": "health",
        "colId": "health",
        "field": "health",
        "cellClassRules": {
            f"health-{level}": f"params.value === '{level}'" for level in ("critical", "warn")
        },
        **TEXT_FILTER,
    },
    {"headerName": "last step", "colId": "last_step", "field": "last_step", **NUMBER_FILTER},
    {"headerName": "updated", "colId": "updated_at", "field": "age", "filter": False},
    {"headerName": "tags", "colId": "tags", "field": "tags", "sortable": False, "filter": False},
]


def column_defs(
    columns: list[str], pinned: list[str], kinds: dict[str, str], state: RunsState | None = None
) -> list[dict[str, Any]]:
    """The fixed columns, then the chosen ones; pinned ones stay at the left while scrolling.

    ``state`` gives the sort the grid starts with (the URL's).
    """
    state = state or RunsState()
    defs = []
    for column in FIXED_COLUMNS:
        pin = "left" if column["colId"] in pinned or column.get("pinned") else None
        defs.append({**column, "pinned": pin, "sort": state.sort_of(column["colId"])})
    for field in columns:
        numeric = (
            kinds.get(field) == "number"
            or field in NUMERIC_HPARAMS
            or field.startswith(NUMERIC_PREFIXES)
        )
        defs.append(
            {
                "headerName": HEADERS.get(field, field),
                "headerTooltip": field,
                "colId": field,
                "field": field,
                "pinned": "left" if field in pinned else None,
                "sort": state.sort_of(field),
                "valueFormatter": NUMBER_FORMAT,
                **(NUMBER_FILTER if numeric else TEXT_FILTER),
            }
        )
    return defs


def column_options(
    fields: list[RunFieldPublic], chosen: list[str] | None
) -> tuple[list[dict[str, str]], dict[str, str]]:
    """Column choices (the chosen first) and each field's kind, for the filters it gets."""
    fixed = {c["colId"] for c in FIXED_COLUMNS}
    kinds: dict[str, str] = {f.name: str(f.kind) for f in fields}
    names = list(dict.fromkeys([*(chosen or []), *(f.name for f in fields if f.name not in fixed)]))
    options = [{"label": HEADERS.get(n, n), "value": n} for n in names]
    return options, kinds


def pin_options(columns: list[str] | None) -> list[dict[str, str]]:
    """The columns the user can pin: the fixed ones and those chosen."""
    fixed = [(c["colId"], c["headerName"]) for c in FIXED_COLUMNS if not c.get("pinned")]
    chosen = [(c, HEADERS.get(c, c)) for c in columns or []]
    return [{"label": label, "value": value} for value, label in fixed + chosen]

"""What the runs grid and the run page show, as values that read from and write to the URL.

Like ``compare_state``: parsed strictly (a parameter that makes no sense falls back to its
default), written with the defaults left out, so a copied link opens the same view.

>>> RunViewState.from_query("smooth=0.8&x=wall&log=1&from=10&to=90").to_query()
'smooth=0.8&x=wall&log=1&from=10&to=90'
>>> RunsState.from_query("status=failed&sort=-last_step&cols=hparam.lr").to_query()
'status=failed&cols=hparam.lr&sort=-last_step'
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Protocol
from urllib.parse import parse_qs, urlencode

from dash import Dash, Input, Output, no_update
from dash.exceptions import PreventUpdate

from rlguard_frontend import ids
from rlguard_frontend.pages.compare.state import THEMES, X_MODES, _choice, _names, _smoothing, _step
from rlguard_frontend.pages.runs.grid import GRID_OPS

GRID_FILTER_TYPES = (*GRID_OPS, "inRange")  # the filters the grid offers
MAX_QUERY_CHARS = 8000  # a longer parameter is not one this app wrote


class UrlState(Protocol):
    """A page's view that a URL holds: ``CompareState``, ``RunViewState``, ``RunsState``."""

    @property
    def theme(self) -> str | None:
        """The theme the link asks for."""

    def to_query(self) -> str:
        """The query string that restores this view."""

    def with_changes(self, **changes: object) -> Any:
        """A copy of the view with the given fields changed."""


def _given(query: str | None) -> dict[str, str]:
    pairs = parse_qs((query or "").lstrip("?"), keep_blank_values=True)
    return {k: v[-1] for k, v in pairs.items() if len(v[-1]) <= MAX_QUERY_CHARS}


@dataclass(frozen=True)
class RunViewState:
    """The run page's view: smoothing, log y, x axis, step range, the key search and picks."""

    smoothing: float = 0.0
    xmode: str = "step"
    log: bool = False
    from_step: int | None = None
    to_step: int | None = None
    keys: str = ""
    theme: str | None = None
    picked: tuple[str, ...] = ()  # other keys whose charts are drawn, in the order picked

    @classmethod
    def from_query(cls, query: str | None) -> RunViewState:
        """Read a query string; values that make no sense fall back to the defaults."""
        given = _given(query)
        lo, hi = _step(given.get("from")), _step(given.get("to"))
        if lo is None or hi is None or hi < lo:
            lo = hi = None  # a zoom is both ends, in order
        return cls(
            smoothing=_smoothing(given.get("smooth")),
            xmode=_choice(given.get("x"), X_MODES, "step") or "step",
            log=given.get("log") == "1",
            from_step=lo,
            to_step=hi,
            keys=given.get("keys", "").strip(),
            theme=_choice(given.get("theme"), THEMES, None),
            picked=_names(given.get("pick")),
        )

    def to_query(self) -> str:
        """The query string that restores this view; defaults are left out."""
        zoomed = self.from_step is not None and self.to_step is not None
        pairs = {
            "smooth": f"{self.smoothing:g}" if self.smoothing else "",
            "x": "" if self.xmode == "step" else self.xmode,
            "log": "1" if self.log else "",
            "from": str(self.from_step) if zoomed else "",
            "to": str(self.to_step) if zoomed else "",
            "keys": self.keys,
            "pick": ",".join(self.picked),
            "theme": self.theme or "",
        }
        return urlencode({k: v for k, v in pairs.items() if v})

    def with_changes(self, **changes: object) -> RunViewState:
        """A copy of the view with the given fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def zoom(self) -> dict[str, int] | None:
        """The step range as the run page's zoom store holds it."""
        if self.from_step is None or self.to_step is None:
            return None
        return {"from": self.from_step, "to": self.to_step}


@dataclass(frozen=True)
class RunsState:
    """The runs grid's view: project, tag and status pickers, columns, pins, sort, filters."""

    project: str | None = None
    tag: str | None = None
    status: str | None = None
    columns: tuple[str, ...] | None = None  # None: the default columns
    pinned: tuple[str, ...] = ()
    sort: tuple[str, ...] = ()  # column ids, "-" first for descending
    filters: tuple[tuple[str, dict[str, Any]], ...] = ()  # AG Grid's filter model, by column
    theme: str | None = None

    @classmethod
    def from_query(cls, query: str | None, statuses: tuple[str, ...] = ()) -> RunsState:
        """Read a query string; values that make no sense fall back to the defaults."""
        given = _given(query)
        status = given.get("status") or None
        return cls(
            project=given.get("project") or None,
            tag=given.get("tag") or None,
            status=status if not statuses or status in statuses else None,
            columns=_names(given["cols"]) if "cols" in given else None,
            pinned=_names(given.get("pin")),
            sort=tuple(s for s in _names(given.get("sort")) if s.lstrip("-")),
            filters=_grid_filters(given.get("filter")),
            theme=_choice(given.get("theme"), THEMES, None),
        )

    def to_query(self) -> str:
        """The query string that restores this view; defaults are left out."""
        pairs = {
            "project": self.project or "",
            "tag": self.tag or "",
            "status": self.status or "",
            "cols": None if self.columns is None else ",".join(self.columns),
            "pin": ",".join(self.pinned),
            "sort": ",".join(self.sort),
            "filter": json.dumps(dict(self.filters), separators=(",", ":")) if self.filters else "",
            "theme": self.theme or "",
        }
        return urlencode({k: v for k, v in pairs.items() if v or (k == "cols" and v == "")})

    def with_changes(self, **changes: object) -> RunsState:
        """A copy of the view with the given fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def filter_model(self) -> dict[str, Any]:
        """The filters as AG Grid's filter model."""
        return dict(self.filters)

    def sort_of(self, column: str) -> str | None:
        """``"asc"``, ``"desc"`` or ``None``: how the grid sorts by ``column``."""
        if column in self.sort:
            return "asc"
        return "desc" if f"-{column}" in self.sort else None


def grid_filters(model: Any) -> tuple[tuple[str, dict[str, Any]], ...]:
    """The conditions of an AG Grid filter model this app can send to the API, in order."""
    if not isinstance(model, dict):
        return ()
    kept = []
    for field, condition in model.items():
        if not isinstance(field, str) or not isinstance(condition, dict):
            continue
        if condition.get("type") not in GRID_FILTER_TYPES:
            continue
        if condition.get("filterType") not in ("text", "number"):
            continue
        values = [condition.get(k) for k in ("filter", "filterTo")]
        if not all(v is None or isinstance(v, (str, int, float)) for v in values):
            continue
        kept.append((field, {k: v for k, v in condition.items() if k in CONDITION_KEYS}))
    return tuple(sorted(kept))


CONDITION_KEYS = ("filterType", "type", "filter", "filterTo")


def _grid_filters(value: str | None) -> tuple[tuple[str, dict[str, Any]], ...]:
    try:
        return grid_filters(json.loads(value)) if value else ()
    except ValueError:
        return ()


def sort_from(sort_model: Any) -> tuple[str, ...]:
    """AG Grid's sort model as column ids, ``-`` first for descending."""
    if not isinstance(sort_model, list):
        return ()
    return tuple(
        ("-" if item.get("sort") == "desc" else "") + item["colId"]
        for item in sort_model
        if isinstance(item, dict) and isinstance(item.get("colId"), str) and item["colId"]
    )


def url_for(state: UrlState, search: str | None, path: str) -> dict[str, str]:
    """The URL search and page location of a state; unchanged when the URL already says it.

    The theme alone makes no history entry: a link carries the viewer's theme, a toggle does
    not add a step to back/forward.
    """
    query = state.to_query()
    if type(state).from_query(search).with_changes(theme=state.theme) == state:  # type: ignore[attr-defined]
        raise PreventUpdate
    return {"search": f"?{query}", "shown": f"{path}?{query}" if query else path}


def next_view(state: UrlState, last: str | None, path: str) -> tuple[Any, str]:
    """(URL for ``push_to_url``, the view) when the view moved on from ``last``.

    ``last`` is ``None`` until the page's first report of its view (the runs grid's first
    request), which is the view the URL built: it is recorded, and no history entry is made,
    so a URL the page shows differently (a sort on a column it lacks) never traps back.
    """
    view = state.with_changes(theme=None).to_query()
    if last is None:
        return no_update, view
    if view == last:
        raise PreventUpdate  # paging or a refresh: the same view
    query = state.to_query()
    return {"search": f"?{query}", "shown": f"{path}?{query}" if query else path}, view


def push_to_url(app: Dash, store: str) -> None:
    """Each ``url_for`` answer a page's ``store`` receives becomes the URL (a history entry).

    The URL lives in the app's shell; only the page's own store may drive it from a page.
    """
    app.clientside_callback(
        "function(url) { return url ? [url.search, url.shown] : "
        "[window.dash_clientside.no_update, window.dash_clientside.no_update]; }",
        Output(ids.URL, "search", allow_duplicate=True),
        Output(ids.PAGE_SHOWN, "data", allow_duplicate=True),
        Input(store, "data"),
        prevent_initial_call=True,
    )

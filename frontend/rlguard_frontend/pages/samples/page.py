"""The samples page of a run: what the policy wrote at a step, or over an alert's steps.

``/runs/<id>/samples?step=N`` shows one step (a slider over the steps that hold samples, live:
following the newest); ``?from=A&to=B`` a step range (an alert's "show samples"), worst reward
first, and ``?from=A`` alone the steps from A to the newest (an open alert's); ``&compare=M``
puts another step's samples beside them, ``&compare_run=R`` another run's (at step M, or at the
step shown); both can be typed in on the page too.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any, NamedTuple
from urllib.parse import parse_qs, quote

from dash import Dash, Input, Output, State, ctx, dcc, html
from dash.exceptions import PreventUpdate

from rlguard_backend.schemas import RunPublic, SamplePublic
from rlguard_frontend import ids
from rlguard_frontend.api_client import ApiClient, ApiError
from rlguard_frontend.pages.samples import views as sample_views

SORTS = ("reward", "advantage", "length", "kl", "entropy")


def path_of(run_id: str) -> str:
    """The samples page's path for a run."""
    return f"/runs/{run_id}/samples"


def layout(run: RunPublic | str, query: str) -> html.Div:
    """The page for ``run`` (its id alone when the API could not be asked); ``query`` is the
    location's (step, from, to, sort, compare)."""
    run_id = run if isinstance(run, str) else run.id
    wanted = {k: v[0] for k, v in parse_qs(query).items()}
    ranged = "from" in wanted
    state = {"run_id": run_id, "from": _int(wanted.get("from")), "to": _int(wanted.get("to"))}
    controls = html.Div(
        [
            html.Label("step"),
            dcc.Slider(
                id=ids.SAMPLES_STEP, min=0, max=0, step=None, value=_int(wanted.get("step"))
            ),
            html.Label("live"),
            dcc.Checklist(
                id=ids.SAMPLES_LIVE,
                options=[{"label": "follow the newest step", "value": "live"}],
                value=[] if ranged or "step" in wanted else ["live"],
            ),
            html.Label("sort"),
            dcc.Dropdown(
                id=ids.SAMPLES_SORT,
                options=list(SORTS),
                value=wanted.get("sort", "reward"),
                clearable=False,
            ),
            html.Label("order"),
            dcc.RadioItems(
                id=ids.SAMPLES_ORDER,
                options=[
                    {"label": "worst first", "value": "asc"},
                    {"label": "best first", "value": "desc"},
                ],
                value=wanted.get("order", "asc" if ranged else "desc"),
                inline=True,
            ),
            html.Label("colour tokens by"),
            dcc.RadioItems(
                id=ids.SAMPLES_COLOUR,
                options=list(sample_views.TOKEN_SIGNALS),
                value="kl",
                inline=True,
            ),
            html.Label("compare with run"),
            dcc.Input(
                id=ids.SAMPLES_COMPARE_RUN,
                placeholder=f"{run_id} (this run)",
                value=wanted.get("compare_run", ""),
                debounce=True,
            ),
            html.Label("at step"),
            dcc.Input(
                id=ids.SAMPLES_COMPARE_STEP,
                type="number",
                min=0,
                placeholder="the step shown",
                value=_int(wanted.get("compare")),
                debounce=True,
            ),
        ],
        className="samples-controls",
    )
    return html.Div(
        [
            html.H2(["Samples of ", *run_title(run)], id=ids.SAMPLES_TITLE),
            dcc.Store(id=ids.SAMPLES_STATE, data=state),
            dcc.Store(id=ids.SAMPLES_DATA),
            controls,
            html.P(id=ids.SAMPLES_CAPTION, className="hint"),
            html.Div(id=ids.SAMPLES_ERROR, className="error"),
            html.Div(
                [
                    html.Div(sample_views.table([], ids.SAMPLES_GRID), id=ids.SAMPLES_TABLE),
                    html.Div(id=ids.SAMPLES_DETAIL),
                ],
                className="samples-body",
            ),
            html.Div(id=ids.SAMPLES_COMPARE),
        ],
        className="samples-page",
    )


def run_title(run: RunPublic | str) -> list[Any]:
    """The run as a title names it: its name (else id) linking to its page, then its project."""
    if isinstance(run, str):
        return [dcc.Link(run, href=f"/runs/{quote(run, safe='')}")]
    link = dcc.Link(run.name or run.id, href=f"/runs/{quote(run.id, safe='')}")
    return [link, html.Span(f" · {run.project}", className="run-project")]


def _int(raw: str | None) -> int | None:
    return int(raw) if raw is not None and raw.lstrip("-").isdigit() else None


def slider_stops(client: ApiClient, run_id: str) -> tuple[int, int, dict[int, str], int | None]:
    """(min, max, marks, newest) over the steps that hold samples."""
    steps = [s.step for s in client.sample_steps(run_id).data]
    if not steps:
        return 0, 0, {}, None
    every = max(1, len(steps) // 10)
    marks = {s: str(s) for s in steps[::every]} | {steps[-1]: str(steps[-1])}
    return steps[0], steps[-1], {s: marks.get(s, "") for s in steps}, steps[-1]


def fetch(
    client: ApiClient, state: dict[str, Any], step: int | None, sort: str, order: str
) -> tuple[list[dict[str, Any]], str]:
    """The samples to show, as JSON, and the caption that says which."""
    run_id = state["run_id"]
    if state["from"] is not None:
        lo, hi = state["from"], state["to"]
        caption = f"since step {lo}" if hi is None else f"steps {lo}–{hi}"
    elif step is not None:
        lo = hi = step
        caption = f"step {step}"
    else:
        return [], "No samples yet: log them with run.log_samples(...)."
    # the table needs no per-token arrays: the selected sample's come on their own (with_tokens)
    found = client.list_samples(
        run_id, from_step=lo, to_step=hi, sort=sort, order=order, tokens=False
    )
    shown = (
        f"{len(found.data)} of {found.count}" if found.count > len(found.data) else str(found.count)
    )
    return [s.model_dump() for s in found.data], f"{caption}: {shown} sample(s), by {sort} {order}"


def follow_steps(client: ApiClient, live: list[str], state: dict[str, Any], value: Any) -> tuple:
    """(min, max, marks, value) of the step slider: the newest step when following it."""
    try:
        low, high, marks, newest = slider_stops(client, state["run_id"])
    except ApiError:
        raise PreventUpdate from None
    chosen = newest if "live" in (live or []) or value is None else value
    return low, high, marks, chosen


COMPARE_INPUTS = frozenset({ids.SAMPLES_COMPARE_RUN, ids.SAMPLES_COMPARE_STEP})


def load_samples(
    client: ApiClient,
    triggers: Set[str],
    step: Any,
    choices: dict[str, Any],
    state: dict[str, Any],
    shown: Any,
) -> tuple:
    """(data, caption, error, beside): the samples at ``step`` and those compared with them.

    ``choices``: ``sort``, ``order``, ``compare_run``, ``compare_step``; ``triggers``: the ids of
    every input that fired in this call (a live tick can land in the same call as a comparison
    typed in). Raises ``PreventUpdate`` for a live tick alone that found nothing new.
    """
    sort, order = choices["sort"], choices["order"]
    comparing = not COMPARE_INPUTS.isdisjoint(triggers)
    try:
        data, caption = fetch(client, state, step, sort, order)
    except ApiError as exc:
        return [], "", str(exc), None
    other = Comparison.of(state["run_id"], choices["compare_run"], choices["compare_step"], step)
    beside = None if other is None else compared(client, other, sort, order)
    if data == shown and not comparing:
        raise PreventUpdate
    return data, caption, "", beside


def fill_table(data: list[dict[str, Any]] | None) -> tuple:
    """(rows, active cell): the table's rows, the first one selected."""
    samples = [SamplePublic.model_validate(s) for s in data or []]
    first = {"row": 0, "column": 0, "column_id": "index"} if samples else None
    return sample_views.rows(samples), first


def show_sample(client: ApiClient, active: dict[str, Any] | None, colour: str, rows: Any) -> tuple:
    """(detail, row style): the selected sample with its tokens coloured by ``colour``."""
    position = None if not active else active.get("row")
    if position is None or not rows or position >= len(rows):
        return None, []
    row = rows[position]
    sample = read_sample(client, row["run_id"], row["step"], row["sample_index"], row["split"])
    detail = None if sample is None else sample_views.detail(sample, colour)
    return detail, sample_views.selected_style(position)


def register(app: Dash, client: ApiClient) -> None:
    """Wire the samples page's callbacks to ``app``."""

    @app.callback(
        Output(ids.SAMPLES_STEP, "min"),
        Output(ids.SAMPLES_STEP, "max"),
        Output(ids.SAMPLES_STEP, "marks"),
        Output(ids.SAMPLES_STEP, "value"),
        Input(ids.TICK, "n_intervals"),
        Input(ids.SAMPLES_LIVE, "value"),
        State(ids.SAMPLES_STATE, "data"),
        State(ids.SAMPLES_STEP, "value"),
    )
    def serve_steps(_tick: Any, live: list[str], state: dict[str, Any], value: Any) -> tuple:
        return follow_steps(client, live, state, value)

    @app.callback(
        Output(ids.SAMPLES_DATA, "data"),
        Output(ids.SAMPLES_CAPTION, "children"),
        Output(ids.SAMPLES_ERROR, "children"),
        Output(ids.SAMPLES_COMPARE, "children"),
        Input(ids.SAMPLES_STEP, "value"),
        Input(ids.SAMPLES_SORT, "value"),
        Input(ids.SAMPLES_ORDER, "value"),
        Input(ids.SAMPLES_COMPARE_RUN, "value"),
        Input(ids.SAMPLES_COMPARE_STEP, "value"),
        State(ids.SAMPLES_STATE, "data"),
        State(ids.SAMPLES_DATA, "data"),
    )
    def serve_samples(
        step: Any, sort: str, order: str, run: Any, at: Any, state: dict[str, Any], shown: Any
    ) -> tuple:
        choices = {"sort": sort, "order": order, "compare_run": run, "compare_step": at}
        triggers = set(ctx.triggered_prop_ids.values())
        return load_samples(client, triggers, step, choices, state, shown)

    app.callback(
        Output(ids.SAMPLES_GRID, "data"),
        Output(ids.SAMPLES_GRID, "active_cell"),
        Input(ids.SAMPLES_DATA, "data"),
    )(fill_table)

    @app.callback(
        Output(ids.SAMPLES_DETAIL, "children"),
        Output(ids.SAMPLES_GRID, "style_data_conditional"),
        Input(ids.SAMPLES_GRID, "active_cell"),
        Input(ids.SAMPLES_COLOUR, "value"),
        State(ids.SAMPLES_GRID, "data"),
    )
    def serve_sample(active: dict[str, Any] | None, colour: str, rows: Any) -> tuple:
        return show_sample(client, active, colour, rows)


def read_sample(
    client: ApiClient, run_id: str, step: int, index: int, split: str
) -> SamplePublic | None:
    """One sample with its per-token arrays (the table's list leaves them out)."""
    try:
        found = client.list_samples(run_id, from_step=step, to_step=step, index=index).data
    except ApiError:
        return None
    return next((s for s in found if s.split == split), None)


class Comparison(NamedTuple):
    """The samples put beside the shown ones: a run (this one or another) at a step."""

    run_id: str
    step: int
    other_run: bool

    @classmethod
    def of(
        cls, run_id: str, compare_run: str | None, compare_step: Any, shown_step: Any
    ) -> Comparison | None:
        """What the compare inputs ask for: another run (at the step given, else the step
        shown), or another step of this run; None when they ask for nothing."""
        other = (compare_run or "").strip()
        step = compare_step if isinstance(compare_step, int) else None
        if other and other != run_id:
            step = step if step is not None else shown_step
            return None if not isinstance(step, int) else cls(other, step, True)
        return None if step is None else cls(run_id, step, False)


def compared(client: ApiClient, other: Comparison, sort: str, order: str) -> html.Div:
    """The samples of the compared run and step, beside the main ones (or why there are none)."""
    title = f"run {other.run_id} · step {other.step}" if other.other_run else f"step {other.step}"
    try:
        found = client.list_samples(
            other.run_id, from_step=other.step, to_step=other.step, sort=sort, order=order
        )
    except ApiError as exc:
        return html.Div(
            [html.H3(f"{title}, to compare"), html.P(str(exc), className="error")],
            className="samples-compare",
        )
    shown = f"{len(found.data)} of {found.count}" if found.count > len(found.data) else found.count
    return html.Div(
        [
            html.H3(f"{title}, to compare: {shown} sample(s)"),
            sample_views.table(found.data, ids.SAMPLES_COMPARE_GRID),
        ],
        className="samples-compare",
    )

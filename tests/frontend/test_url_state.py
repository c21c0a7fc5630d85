"""The runs grid's and the run page's URL state as plain values and callbacks: no browser."""

from __future__ import annotations

import pytest
from dash import html, no_update
from dash.exceptions import PreventUpdate

from rlguard_frontend import ids, routing
from rlguard_frontend.api_client import ApiClient
from rlguard_frontend.pages.run import callbacks as run_callbacks
from rlguard_frontend.pages.runs import page as runs
from rlguard_frontend.url_state import RunsState, RunViewState, next_view, url_for
from tests.frontend.helpers import find_component

LR_FILTER = {"hparam.lr": {"filterType": "number", "type": "lessThan", "filter": 3e-06}}


def test_runs_state_round_trips_through_its_query() -> None:
    state = RunsState(
        project="vision & co",
        tag="a,b?",
        status="failed",
        columns=("hparam.lr", "config.optim.beta"),
        pinned=("name",),
        sort=("-hparam.lr", "name"),
        filters=tuple(LR_FILTER.items()),
        theme="dark",
    )
    assert RunsState.from_query(state.to_query()) == state
    assert RunsState.from_query(RunsState().to_query()) == RunsState()
    assert RunsState.from_query("cols=").columns == ()  # every chosen column removed


@pytest.mark.parametrize(
    "query",
    [
        "filter=not-json",
        "filter=[1,2]",
        'filter={"a":{"filterType":"set","type":"equals","filter":1}}',
        'filter={"a":{"filterType":"text","type":"drop table","filter":"x"}}',
        'filter={"a":{"filterType":"text","type":"equals","filter":{"$ne":1}}}',
        "status=nonsense&theme=purple&sort=-,",
        "filter=" + "x" * 9000,
    ],
)
def test_runs_state_ignores_what_makes_no_sense(query: str) -> None:
    assert RunsState.from_query(query, runs.STATUS_FILTERS) == RunsState()


def test_runs_state_from_the_grids_request_drops_the_default_columns() -> None:
    request = {
        "startRow": 50,
        "sortModel": [{"colId": "last_step", "sort": "desc"}],
        "filterModel": {**LR_FILTER, "name": {"filterType": "text", "type": "bad"}},
    }
    columns = list(runs.DEFAULT_COLUMNS)
    state = runs.state_from("p", " t ", None, columns, ["name"], request, None)
    assert state == RunsState(
        project="p",
        tag="t",
        pinned=("name",),
        sort=("-last_step",),
        filters=tuple(LR_FILTER.items()),
    )
    with pytest.raises(PreventUpdate):  # paging alone is no new view
        url_for(state, "?" + state.to_query(), "/")
    assert url_for(state, "", "/")["shown"] == "/?" + state.to_query()


def test_runs_next_view_records_the_first_view_and_pushes_only_changes() -> None:
    built = RunsState(status="failed", theme="dark")
    assert next_view(built, None, "/") == (no_update, "status=failed")  # as the URL built it
    with pytest.raises(PreventUpdate):  # a refresh or another page of rows: the same view
        next_view(built.with_changes(theme="light"), "status=failed", "/")
    moved = built.with_changes(sort=("name",))
    assert next_view(moved, "status=failed", "/") == (
        {
            "search": "?status=failed&sort=name&theme=dark",
            "shown": "/?status=failed&sort=name&theme=dark",
        },
        "status=failed&sort=name",
    )


def test_runs_layout_comes_with_the_urls_view() -> None:
    query = RunsState(
        status="failed",
        columns=("hparam.lr",),
        pinned=("name",),
        sort=("-hparam.lr",),
        filters=tuple(LR_FILTER.items()),
    ).to_query()
    page = runs.layout(query)
    assert find_component(page, ids.RUNS_STATUS).value == "failed"
    assert find_component(page, ids.RUNS_COLUMNS).value == ["hparam.lr"]
    assert find_component(page, ids.RUNS_PINNED).value == ["name"]
    grid = find_component(page, ids.RUNS_TABLE)
    assert grid.filterModel == LR_FILTER
    sorts = {d["colId"]: d["sort"] for d in grid.columnDefs if d["sort"]}
    assert sorts == {"hparam.lr": "desc"}
    assert {d["colId"]: d["pinned"] for d in grid.columnDefs}["name"] == "left"


def test_run_view_state_round_trips_and_ignores_nonsense() -> None:
    state = RunViewState(0.8, "wall", True, 10, 90, "actor/kl", "light", ("a/b", "c"))
    assert state.to_query().count("pick=a%2Fb%2Cc") == 1
    assert RunViewState.from_query(state.to_query()) == state
    for query in ("smooth=nan&x=moon&log=yes", "from=90&to=10", "from=-5&to=9", "from=10"):
        assert RunViewState.from_query(query) == RunViewState()
    assert RunViewState.from_query("smooth=7").smoothing == 0.99


def test_run_view_state_from_the_controls_and_its_url() -> None:
    zoom = {"from": 3, "to": 40}
    state = run_callbacks.view_state(0.5, ["log"], "step", zoom, " kl ", ["x/y"], "dark")
    assert state == RunViewState(0.5, "step", True, 3, 40, "kl", "dark", ("x/y",))
    answer = url_for(state, "", "/runs/r 1")
    assert answer == {"search": f"?{state.to_query()}", "shown": f"/runs/r 1?{state.to_query()}"}
    with pytest.raises(PreventUpdate):  # the theme alone makes no history entry
        url_for(state, answer["search"].replace("theme=dark", "theme=light"), "/runs/r 1")
    assert run_callbacks.key_style("actor/kl", "KL") == {}
    assert run_callbacks.key_style("actor/entropy", "kl") == {"display": "none"}


def test_run_page_built_from_a_url_says_its_view_even_when_the_api_is_down() -> None:
    where = "/runs/r1?smooth=0.6&x=relative&log=1&from=5&to=50&keys=kl"
    page = routing.page_for(ApiClient("http://127.0.0.1:9/api"), where, None)
    assert isinstance(page, html.Div)
    assert find_component(page, ids.RUN_ZOOM).data == {"from": 5, "to": 50}
    assert find_component(page, ids.RUN_ZOOM_LABEL).children == "steps 5–50"
    assert find_component(page, ids.RUN_KEY_SEARCH).value == "kl"
    assert find_component(page, "run-smoothing").value == 0.6
    assert find_component(page, "run-xaxis").value == "relative"
    assert find_component(page, "run-log").value == ["log"]

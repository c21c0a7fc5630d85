"""The pages' callbacks as plain functions over a real API (uvicorn, SQLite): no browser."""

from __future__ import annotations

import html
import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from dash import html as dash_html
from dash import no_update
from dash.exceptions import PreventUpdate

from rlguard_backend.schemas import AlertPublic, SamplePublic, SampleTokens, SeriesData
from rlguard_frontend import figures, ids, panel_views
from rlguard_frontend.api_client import ApiClient
from rlguard_frontend.components import alert_views
from rlguard_frontend.figures import PALETTE, View, merged_ranges, step_span
from rlguard_frontend.pages import inbox
from rlguard_frontend.pages.compare import page as compare
from rlguard_frontend.pages.compare.figures import RunMarks, compare_figure
from rlguard_frontend.pages.compare.state import CompareState
from rlguard_frontend.pages.compare.tables import delta_table, markdown_text
from rlguard_frontend.pages.run import callbacks as run_callbacks
from rlguard_frontend.pages.run import data as run_data
from rlguard_frontend.pages.run import page as run_page
from rlguard_frontend.pages.runs import grid as runs_grid
from rlguard_frontend.pages.runs import page as runs
from rlguard_frontend.pages.samples import page as samples
from rlguard_frontend.pages.samples import views as sample_views
from tests.conftest import RunningServer, new_run_id
from tests.frontend.helpers import find_component, seed_run


@pytest.fixture
def client(server: RunningServer) -> Iterator[ApiClient]:
    yield ApiClient(f"{server.url}/api")


@pytest.fixture
def sweep(server: RunningServer) -> list[str]:
    """Four runs: lr 1e-3 / 2e-3 × seed 0 / 1; entropy = 1000·lr + seed."""
    project = new_run_id("cb")
    run_ids = []
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for lr in (1e-3, 2e-3):
            for seed in (0, 1):
                run_id = new_run_id("cb")
                config = {"optim": {"lr": lr}, "seed": seed}
                body = {"id": run_id, "project": project, "name": run_id, "config": config}
                http.post("/api/v1/runs", json=body).raise_for_status()
                rows = [
                    {"step": s, "values": {"actor/entropy": 1000 * lr + seed}} for s in range(50)
                ]
                batch = {"batch_id": "b", "steps": rows}
                http.post(f"/api/v1/runs/{run_id}/batches", json=batch).raise_for_status()
                run_ids.append(run_id)
    return run_ids


def test_runs_grid_rows_answers_the_grids_request_from_the_api(
    client: ApiClient, sweep: list[str]
) -> None:
    request = {
        "startRow": 0,
        "endRow": 50,
        "sortModel": [{"colId": "hparam.lr", "sort": "desc"}],
        "filterModel": {
            "last.entropy": {"filterType": "number", "type": "greaterThan", "filter": 1.5}
        },
    }
    response, count, error = runs_grid.grid_rows(client, request, None, None, None, ["hparam.lr"])
    assert error == ""
    assert [r["id"] for r in response["rowData"]] == [sweep[3], sweep[2], sweep[1]]
    assert response["rowCount"] == 3 and count == "3 of 4 runs match"
    assert [r["hparam.lr"] for r in response["rowData"]] == [2e-3, 2e-3, 1e-3]


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (
            {"name": {"filterType": "text", "type": "contains", "filter": "a:b"}},
            ["name:contains:a:b"],
        ),
        ({"x": {"filterType": "number", "type": "lessThan", "filter": 3}}, ["x:lt:3"]),
        (
            {"x": {"operator": "AND", "conditions": [{"type": "equals", "filter": 1}]}},
            ["x:eq:1"],
        ),
        ({"x": {"filterType": "text", "type": "equals"}}, []),  # nothing typed yet
        (None, []),
    ],
)
def test_runs_api_filters_translate_the_grids_filter_model(
    model: dict[str, Any] | None, expected: list[str]
) -> None:
    assert runs_grid.api_filters(model) == expected


def test_compare_view_groups_bands_and_diffs_configs(client: ApiClient, sweep: list[str]) -> None:
    state = CompareState(runs=tuple(sweep), group_by=("config.optim.lr",))
    cards, deltas, config, error = compare.compare_view(client, state)
    assert error == "" and "(baseline)" in html.unescape(str(deltas))  # Markdown, escaped
    (entropy,) = [c for c in cards if c.children[0].children == "entropy"]
    figure = entropy.children[1].figure
    means = [t for t in figure["data"] if t.get("meta", {}).get("role") == "mean"]
    assert [t["name"] for t in means] == ["optim.lr=0.001 · 2 runs", "optim.lr=0.002 · 2 runs"]
    assert [set(t["y"]) for t in means] == [{1.5}, {2.5}]
    assert "optim.lr" in html.unescape(str(config)) and "seed" in html.unescape(str(config))


@pytest.mark.parametrize(
    ("value", "change", "cell"),
    [
        (0.5, 25.0, "0.5 (+25.0 %)"),  # entropy has no better way: plain
        (-1.5e-05, -40.0, "-1.5e-05 (-40.0 %)"),
        (2.0, 0.4, "2 (+0.4 %)"),
        (1.0, None, "1"),  # the baseline's own row
        (None, None, "—"),
    ],
)
def test_compare_delta_table_cells_are_numbers_and_names_literal_text(
    value: float | None, change: float | None, cell: str
) -> None:
    rows = [{"run": "r1", "baseline": False, "entropy": (value, change)}]
    table = delta_table(["entropy"], rows, {"r1": "**bold** | <b>"})
    markdown = table.children[1].children
    assert markdown.splitlines()[2] == f"| {markdown_text('**bold** | <b>')} | {cell} |"


@pytest.mark.parametrize(
    ("signal", "change", "marked"),
    [
        ("ppo_kl", 67.0, "*"),  # KL up: worse (orange)
        ("ppo_kl", -30.0, "**"),  # KL down: better (green)
        ("reward_mean", 12.0, "**"),
        ("reward_mean", -12.0, "*"),
        ("clipfrac", 5.0, "*"),
        ("entropy", -50.0, ""),  # either way can be the failure: plain
        ("response_length", 80.0, ""),
    ],
)
def test_compare_delta_colours_say_better_or_worse_for_the_signal(
    signal: str, change: float, marked: str
) -> None:
    rows = [{"run": "r1", "baseline": False, signal: (1.0, change)}]
    row = delta_table([signal], rows, {"r1": "r1"}).children[1].children.splitlines()[2]
    cell = row.split(" | ")[1].removesuffix(" |")
    expected = f"1 ({change:+.1f} %)"
    assert cell == f"{marked}{expected}{marked[::-1]}"


def test_compare_url_for_pushes_only_real_changes() -> None:
    state = CompareState(runs=("a", "b"), band="minmax", theme="dark")
    assert compare.url_for(state, "?runs=a,b") == {
        "search": "?runs=a%2Cb&band=minmax&theme=dark",
        "shown": "/compare?runs=a%2Cb&band=minmax&theme=dark",
    }
    with pytest.raises(PreventUpdate):
        compare.url_for(state, "?runs=a,b&band=minmax")  # the theme alone is no new view


def test_compare_grouping_choices_leave_seeds_out(client: ApiClient, sweep: list[str]) -> None:
    options, baseline, keys = compare.grouping_choices(client, sweep, None, None)
    assert [o["value"] for o in options] == sweep and baseline == sweep[0]
    assert [k["value"] for k in keys] == ["config.optim.lr"]


def test_runs_layout_comes_with_the_pickers_choices(client: ApiClient, sweep: list[str]) -> None:
    project = client.get_run(sweep[0]).project
    page = runs.layout(f"project={project}", client)
    assert {"label": project, "value": project} in find_component(page, ids.RUNS_PROJECT).options
    columns = [o["value"] for o in find_component(page, ids.RUNS_COLUMNS).options]
    assert "config.optim.lr" in columns and "hparam.lr" in columns
    assert find_component(page, ids.RUNS_KINDS).data["config.optim.lr"] == "number"
    assert "tick runs to compare" in str(find_component(page, ids.RUNS_COMPARE).children)
    known = find_component(page, ids.RUNS_TOTAL).data
    assert known == {"total": client.list_runs(limit=1).count, "refresh": 0}
    with pytest.raises(PreventUpdate):  # the first tick: the grid has just asked for its rows
        runs.runs_total(client, 0, known)
    assert runs.runs_total(client, runs.REFRESH_EVERY_TICKS, known)["refresh"] == 1
    assert runs.runs_total(client, 3, {"total": -1, "refresh": 4})["refresh"] == 5  # a new run


def test_compare_layout_comes_with_the_pickers_choices(client: ApiClient, sweep: list[str]) -> None:
    page = compare.layout(f"runs={','.join(sweep)}&baseline={sweep[1]}", client)
    keys = find_component(page, ids.COMPARE_GROUP_BY).options
    assert [k["value"] for k in keys] == ["config.optim.lr"]  # seeds left out
    baseline = find_component(page, ids.COMPARE_BASELINE)
    assert [o["value"] for o in baseline.options] == sweep and baseline.value == sweep[1]
    picked = [o["value"] for o in find_component(page, ids.COMPARE_RUNS).options]
    assert set(sweep) <= set(picked)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", CompareState()),
        (
            "runs=a,b,a&smooth=7&x=sideways&from=-3&to=9",
            CompareState(runs=("a", "b"), smoothing=0.99, to_step=9),
        ),
        ("band=minmax&log=1&theme=blue", CompareState(band="minmax", log=True)),
    ],
)
def test_compare_state_reads_any_query_into_a_sane_view(query: str, expected: CompareState) -> None:
    assert CompareState.from_query(query) == expected
    assert CompareState.from_query(expected.to_query()) == expected


def test_run_draw_panels_and_extend_panels_without_a_browser(
    server: RunningServer, client: ApiClient
) -> None:
    run_id = new_run_id("cbrun")
    seed_run(server.url, run_id, steps=100)
    plan = run_data.make_plan(client, client.get_run(run_id), None)
    (entropy,), cursor = run_callbacks.draw_panels(
        client, run_id, ["entropy"], plan, {"smoothing": 0.5, "xmode": "step"}
    )
    roles = [t["meta"]["role"] for t in entropy["data"]]
    assert roles == ["raw", "smooth", "alerts"] and len(entropy["data"][0]["x"]) == 100
    assert cursor["cursor"] == {"actor/entropy": 99}
    with pytest.raises(PreventUpdate):  # nothing new past the cursor
        run_callbacks.extend_panels(client, run_id, cursor, [{"panel": "entropy"}], {"live": True})
    more = [{"step": 100, "values": {"actor/entropy": 0.1}}]
    httpx.post(f"{server.url}/api/v1/runs/{run_id}/batches", json={"batch_id": "m", "steps": more})
    live, state, redraw = run_callbacks.extend_panels(
        client, run_id, cursor, [{"panel": "entropy"}], {"live": True, "smoothing": 0.5}
    )
    ((update, indices),) = live["payloads"]
    assert update["x"][0] == [100] and indices == [0, 1]
    assert state["cursor"]["actor/entropy"] == 100 and redraw is False


@pytest.mark.parametrize(
    ("event", "reset", "expected"),
    [
        (
            {"xaxis.range[0]": 10.4, "xaxis.range[1]": 50.2},
            False,
            ({"from": 10, "to": 51}, "steps 10–51"),
        ),
        ({"xaxis.autorange": True}, False, (None, "all steps")),
        ({}, True, (None, "all steps")),
    ],
)
def test_run_shared_zoom_follows_a_relayout_or_a_reset(
    event: dict[str, Any], reset: bool, expected: tuple[Any, Any]
) -> None:
    assert run_callbacks.shared_zoom(event, reset, "step", {"from": 0, "to": 5}) == expected


def test_compare_view_draws_every_runs_markers_in_its_colour_and_the_baselines_on_bands(
    server: RunningServer, client: ApiClient, sweep: list[str]
) -> None:
    for run_id, step in ((sweep[1], 30), (sweep[2], 40)):
        rewind = {"resume_from_step": step}
        httpx.post(f"{server.url}/api/v1/runs/{run_id}/rewind", json=rewind).raise_for_status()
    overlaid = CompareState(runs=tuple(sweep), baseline=sweep[0])
    cards, _, _, error = compare.compare_view(client, overlaid)
    assert error == "" and cards
    for card in cards:
        layout = card.children[1].figure["layout"]
        assert [s["x0"] for s in layout["shapes"]] == [30, 40]
        assert len({s["line"]["color"] for s in layout["shapes"]}) == 2  # each run's colour
        hovers = [a.get("hovertext") for a in layout["annotations"]]
        assert hovers == [f"{sweep[1]}: rewind (step 30)", f"{sweep[2]}: rewind (step 40)"]
    banded = CompareState(runs=tuple(sweep), baseline=sweep[1], group_by=("config.optim.lr",))
    cards, _, _, error = compare.compare_view(client, banded)
    assert error == "" and cards
    for card in cards:
        layout = card.children[1].figure["layout"]
        assert [s["x0"] for s in layout["shapes"]] == [30]
        assert [a.get("hovertext") for a in layout["annotations"]] == ["rewind (step 30)"]


def _alert(**fields: Any) -> AlertPublic:
    """An alert as the API returns it: a WARN entropy_collapse unless ``fields`` say else."""
    alert = {
        "run_id": "r",
        "run_name": "seed0",
        "project": "grpo",
        "detector": "entropy_collapse",
        "key": "entropy_collapse",
        "severity": "warn",
        "secondary": False,
        "acknowledged": False,
        "message": "m",
        "evidence": {},
        "advice": [],
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    return AlertPublic.model_validate({**alert, **fields})


def test_compare_figure_draws_a_runs_warn_and_critical_alerts_in_its_colour() -> None:
    series = SeriesData(
        steps=[0, 50, 100],
        values=[1.0, 1.0, 1.0],
        downsampled=False,
        method="raw",
        total_points=3,
        last_step=100,
    )
    alerts = [
        _alert(run_id="b", detector="nonfinite", key="entropy", status="open", **extra)
        for extra in (
            {"id": 1, "severity": "critical", "first_step": 50, "last_step": 50},
            {"id": 2, "severity": "info", "first_step": 80, "last_step": 80},
        )
    ]
    marks = [None, RunMarks(alerts=alerts)]
    lines = [("a", series, None), ("b", series, None)]
    figure = compare_figure("entropy", "nats", lines, View(), marks)
    shapes = figure["layout"]["shapes"]
    assert [s["x0"] for s in shapes] == [50]  # the info alert stays on the run page
    assert shapes[0]["line"]["color"] == figure["data"][1]["line"]["color"]


def test_compare_figure_past_the_legend_limit_draws_one_trace_per_colour_naming_runs() -> None:
    """20 runs: the baseline's line is a trace of its own, thicker, on top; the others' are one
    trace per colour whose every point's hover names its run (as text, escaped)."""
    runs = []
    for i in range(20):
        values = [float(i), float(i) + 0.5, float(i)]
        series = SeriesData(
            steps=[0, 10, 20],
            values=values,
            downsampled=False,
            method="raw",
            total_points=3,
            last_step=20,
        )
        runs.append((f"<b>run {i}</b>", series, None))
    figure = compare_figure("entropy", "nats", runs, View(), baseline=5)
    *merged, baseline = figure["data"]
    assert baseline["name"] == "&lt;b&gt;run 5&lt;/b&gt;" and baseline["y"] == [5.0, 5.5, 5.0]
    assert baseline["line"]["width"] > merged[0]["line"]["width"]
    assert len(merged) == len(PALETTE) and sum(t["meta"]["runs"] for t in merged) == 19
    assert len({t["line"]["color"] for t in merged}) == len(PALETTE)
    named = {}
    for trace in merged:
        assert "%{text}" in trace["hovertemplate"] and trace["meta"]["role"] == "raw"
        for x, y, name in zip(trace["x"], trace["y"], trace["text"], strict=True):
            assert (x is None) == (y is None) == (name is None)  # the gaps between runs
            if name is not None:
                named.setdefault(name, []).append(y)
    assert named == {
        f"&lt;b&gt;run {i}&lt;/b&gt;": [float(i), i + 0.5, float(i)] for i in range(20) if i != 5
    }
    assert figure["layout"]["showlegend"] is False and figure["layout"]["hovermode"] == "closest"


def test_an_open_alert_shades_to_the_newest_step_and_a_resolved_one_to_its_last() -> None:
    opened = _alert(id=1, status="open", first_step=15, last_step=16)
    resolved = _alert(id=2, status="resolved", first_step=15, last_step=16)
    steps = list(range(0, 50))  # the run has logged steps 0..49; the alert last refreshed at 16
    assert merged_ranges([opened], steps)[0][1:] == (15, 49)
    assert merged_ranges([resolved], steps)[0][1:] == (15, 16)
    assert (step_span(opened), step_span(resolved)) == ("since step 15", "steps 15–16")


def test_an_open_alerts_samples_link_runs_to_the_newest_step_as_its_shading_does() -> None:
    opened = _alert(id=1, status="open", first_step=15, last_step=16)
    resolved = _alert(id=2, status="resolved", first_step=15, last_step=16)
    assert alert_views.samples_link(opened).href.endswith("?from=15&sort=reward&order=asc")
    assert "?from=15&to=16&" in alert_views.samples_link(resolved).href


def test_samples_from_a_step_alone_reach_the_newest_step(
    client: ApiClient, sampled_run: str
) -> None:
    run_id = sampled_run
    since = {"run_id": run_id, "from": 12, "to": None}
    data, caption = samples.fetch(client, since, None, "reward", "asc")
    assert [(d["step"], d["index"]) for d in data] == [(20, 0), (20, 1)]
    assert caption == "since step 12: 2 sample(s), by reward asc"
    ranged = {"run_id": run_id, "from": 10, "to": 19}
    assert len(samples.fetch(client, ranged, None, "reward", "asc")[0]) == 3


def _nan_run(server: RunningServer) -> str:
    """A run whose NaN entropy opens a CRITICAL alert."""
    run_id = new_run_id("cb-inbox")
    with httpx.Client(base_url=server.url, timeout=30) as http:
        http.post("/api/v1/runs", json={"id": run_id, "project": "cb"}).raise_for_status()
        steps = [{"step": s, "values": {"actor/entropy": "NaN"}} for s in range(12)]
        body = {"batch_id": "nan", "steps": steps}
        http.post(f"/api/v1/runs/{run_id}/batches", json=body).raise_for_status()
    return run_id


def test_inbox_acknowledges_and_resolves_the_ticked_alerts(
    client: ApiClient, server: RunningServer
) -> None:
    first, second = _nan_run(server), _nan_run(server)
    options, _, count, error = inbox.show_inbox(client, {ids.INBOX_SEVERITY}, ["critical"], [], [])
    mine = {o["value"]: o for o in options if o["label"].children[2].children in (first, second)}
    assert error == "" and len(mine) == 2 and count == f"{len(options)} open alert(s)"
    ticked = [a.id for a in client.list_alerts(first).data]
    acked = inbox.show_inbox(client, {ids.INBOX_ACKNOWLEDGE}, ["critical"], ticked, options)
    assert acked[1] == [] and all(a.acknowledged for a in client.list_alerts(first).data)
    with pytest.raises(PreventUpdate):  # a tick that finds nothing new
        inbox.show_inbox(client, {ids.TICK}, ["critical"], [], acked[0])
    # the click lands in the same call as a live tick: the ticked alerts are still resolved
    both = {ids.TICK, ids.INBOX_RESOLVE}
    resolved = inbox.show_inbox(client, both, ["critical"], ticked, acked[0])
    left = {o["value"] for o in resolved[0]}
    assert not left & set(ticked) and {a.id for a in client.list_alerts(second).data} <= left
    assert [a.status for a in client.list_alerts(first).data] == ["resolved"] * len(ticked)


def _post_samples(server: RunningServer, run_id: str, step: int, count: int) -> None:
    rows = [
        {"step": step, "index": i, "prompt": f"q{i}", "response": f"a{i}", "reward": float(i)}
        for i in range(count)
    ]
    body = {"batch_id": f"s{step}", "samples": rows}
    httpx.post(f"{server.url}/api/v1/runs/{run_id}/samples", json=body).raise_for_status()


@pytest.fixture
def sampled_run(server: RunningServer) -> str:
    """A 30-step run with 3 samples at step 10 and 2 at step 20."""
    run_id = new_run_id("cb-samples")
    seed_run(server.url, run_id, steps=30)
    _post_samples(server, run_id, 10, 3)
    _post_samples(server, run_id, 20, 2)
    return run_id


def test_samples_follow_the_newest_step_and_show_the_selected_sample(
    client: ApiClient, sampled_run: str
) -> None:
    run_id = sampled_run
    state = {"run_id": run_id, "from": None, "to": None}
    low, high, _, step = samples.follow_steps(client, ["live"], state, 10)
    assert (low, high, step) == (10, 20, 20)
    assert samples.follow_steps(client, [], state, 10)[3] == 10  # not live: the step chosen
    choices = {"sort": "reward", "order": "desc", "compare_run": "", "compare_step": 10}
    data, caption, error, beside = samples.load_samples(
        client, {ids.SAMPLES_STEP}, step, choices, state, None
    )
    assert [d["index"] for d in data] == [1, 0] and caption.startswith("step 20: 2 sample")
    assert error == "" and "step 10, to compare: 3 sample(s)" in str(beside)
    with pytest.raises(PreventUpdate):  # a live tick that found nothing new
        samples.load_samples(client, {ids.SAMPLES_STEP}, step, choices, state, data)
    # a tick landing in the same call as a run typed in to compare: the comparison is shown
    other = {**choices, "compare_run": "no-such-run"}
    triggers = {ids.SAMPLES_STEP, ids.SAMPLES_COMPARE_RUN}
    beside = samples.load_samples(client, triggers, step, other, state, data)[3]
    assert "run no-such-run · step 10, to compare" in str(beside)
    rows, active = samples.fill_table(data)
    assert active == {"row": 0, "column": 0, "column_id": "index"} and len(rows) == 2
    detail, style = samples.show_sample(client, {"row": 1}, "kl", rows)
    assert "a0" in str(detail) and style == sample_views.selected_style(1)
    assert samples.show_sample(client, None, "kl", rows) == (None, [])


def test_samples_tokens_past_a_shorter_array_are_drawn_unshaded() -> None:
    """Per-token arrays are stored as sent: a ``kl`` shorter than the text leaves the last
    tokens without a value, drawn all the same."""
    fields = dict.fromkeys(SamplePublic.model_fields) | {"scores": {}, "cut": False}
    fields |= {"run_id": "r", "step": 1, "index": 0, "split": "train"}
    sample = SamplePublic(**fields | {"tokens": SampleTokens(text=["a", "b", "c"], kl=[0.5])})
    spans = sample_views.tokens(sample, "kl").children
    assert [s.children for s in spans] == ["a", "b", "c"]
    assert [s.style["backgroundColor"] for s in spans][1:] == ["transparent"] * 2
    assert spans[0].style["backgroundColor"] != "transparent"


def _refresh(client: ApiClient, run_id: str, plan: Any, steps: Any, cells: list[str]) -> tuple:
    def build(new_plan: dict[str, Any], values: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "cards", values

    return run_callbacks.refresh_run(client, run_id, plan, steps, cells, build, lambda run: "")


def test_run_refresh_updates_only_moved_values_and_rebuilds_for_a_new_key(
    server: RunningServer, client: ApiClient
) -> None:
    run_id = new_run_id("cbkeys")
    seed_run(server.url, run_id, steps=30, extra_keys={"x/a": 1.0, "x/b": 2.0})
    post = f"{server.url}/api/v1/runs/{run_id}/batches"
    once = [{"step": 0, "values": {"x/once": "NaN"}}]  # logged once, long ago
    httpx.post(post, json={"batch_id": "once", "steps": once}).raise_for_status()
    plan = run_data.make_plan(client, client.get_run(run_id), None)
    assert plan["minis"] == {"k0": "x/a", "k1": "x/b", "k2": "x/once"}
    steps = {"x/a": 29, "x/b": 29, "x/once": 0}
    assert run_data.last_values(client, run_id, steps) == {"x/a": 1.0, "x/b": 2.0, "x/once": "NaN"}
    still = _refresh(client, run_id, plan, steps, ["k0", "k1", "k2"])
    assert still[2:] == (no_update, no_update, no_update, [no_update] * 3, no_update)
    more = [{"step": 30, "values": {"x/a": 0.123456}}]
    httpx.post(post, json={"batch_id": "more", "steps": more}).raise_for_status()
    answer = _refresh(client, run_id, plan, steps, ["k0", "k1", "k2"])
    assert answer[2:5] == (no_update, no_update, no_update)  # same plan, same parts
    assert answer[5] == ["0.1235", no_update, no_update]
    assert answer[6] == {**steps, "x/a": 30}
    new = [{"step": 31, "values": {"x/aa": 5.0}}]
    httpx.post(post, json={"batch_id": "new", "steps": new}).raise_for_status()
    _header, error, new_plan, cards, values, cells, moved = _refresh(
        client, run_id, plan, answer[6], ["k0", "k1", "k2"]
    )
    assert error == "" and cards == "cards" and cells == [no_update] * 3
    assert list(new_plan["minis"].values()) == ["x/a", "x/aa", "x/b", "x/once"]
    assert values == {"x/a": 0.123456, "x/aa": 5.0, "x/b": 2.0, "x/once": "NaN"}
    assert moved == {"x/a": 30, "x/aa": 31, "x/b": 29, "x/once": 0}


def test_run_picked_chart_joins_the_live_cursor_and_leaves_it(
    server: RunningServer, client: ApiClient
) -> None:
    run_id = new_run_id("cbpick")
    seed_run(server.url, run_id, steps=40, extra_keys={"x/a": 1.0})
    plan = run_data.make_plan(client, client.get_run(run_id), None)
    _figures, state = run_callbacks.draw_panels(client, run_id, ["entropy"], plan, {})
    figure, picked = run_callbacks.draw_picked(client, run_id, "k0", plan, state, {})
    assert len(figure["data"][0]["x"]) == 40 and figure["data"][0]["meta"]["key"] == "x/a"
    assert picked["cursor"] == {"actor/entropy": 39, "x/a": 39}
    assert set(picked["traces"]) == {"entropy", "k0"}
    assert run_callbacks.without_chart(picked, "k0") == state
    assert run_callbacks.toggled(["x/a", "x/b"], "x/a") == ["x/b"]
    assert run_callbacks.toggled(["x/b"], "x/a") == ["x/b", "x/a"]


@pytest.mark.parametrize(
    ("steps", "values", "path"),
    [
        ([0, 10], [0.0, 1.0], "M1.0 23.0l0 0L119.0 1.0"),  # rising: bottom left to top right
        ([0, 5, 10], [2.0, 2.0, 2.0], "M1.0 12.0l0 0L60.0 12.0L119.0 12.0"),  # flat: mid-height
        ([0, 5, 10], [0.0, "NaN", 1.0], "M1.0 23.0l0 0M119.0 1.0l0 0"),  # NaN breaks the line
        ([7], [3.0], "M60.0 12.0l0 0"),  # one point: a dot
    ],
)
def test_sparkline_draws_the_trend_as_an_svg_image(
    steps: list[int], values: list[Any], path: str
) -> None:
    source = figures.sparkline(steps, values)
    assert source.startswith("data:image/svg+xml;charset=utf-8,")
    assert f'd="{path}"' in urllib.parse.unquote(source)


def test_sparkline_of_no_finite_points_is_empty() -> None:
    assert figures.sparkline([0, 1], ["NaN", "Infinity"]) == ""
    assert figures.sparkline([], []) == ""


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.123456, "0.1235"), (12345678.0, "1.235e+07"), (3, "3"), ("NaN", "NaN"), (None, "—")],
)
def test_key_value_text_shows_four_digits_and_non_finite_by_name(value: Any, text: str) -> None:
    assert run_data.value_text(value) == text


def test_run_entropy_guide_is_the_start_the_entropy_alert_reports(
    server: RunningServer, client: ApiClient
) -> None:
    """The panel's "start" guide and the alert's ``entropy_start`` are one definition
    (``schemas.start_level``): a NaN first point and a noisy start would part a mean of the
    first 10 points (the guide's old definition) from the median of the first 5."""
    from tests.detectors.scenarios import SCENARIOS

    scenario = next(s for s in SCENARIOS if s.name == "S2_early_collapse")
    steps = scenario.run(0)
    steps[0][1]["actor/entropy"] = float("nan")
    for t, noise in enumerate((0.4, -0.3, 0.2, -0.1, 0.3, 0.5, -0.2, 0.1, 0.2, 0.4), start=1):
        steps[t][1]["actor/entropy"] += noise
    run_id = new_run_id("start")
    rows = [{"step": t, "values": values} for t, values in steps]
    with httpx.Client(base_url=server.url, timeout=30) as http:
        body = {"id": run_id, "project": "start", "config": scenario.config}
        http.post("/api/v1/runs", json=body).raise_for_status()
        body = {"batch_id": "all", "steps": json.loads(json.dumps(rows).replace("NaN", '"NaN"'))}
        http.post(f"/api/v1/runs/{run_id}/batches", json=body).raise_for_status()
    alert = next(a for a in client.list_alerts(run_id).data if a.detector == "entropy_collapse")
    plan = run_data.make_plan(client, client.get_run(run_id), None)
    assert plan["entropy_start"] == pytest.approx(alert.evidence["entropy_start"], rel=1e-4)
    guide, _half = panel_views.guides("entropy", plan)
    assert guide.label == f"start {alert.evidence['entropy_start']:.3g}"
    first_ten = [steps[t][1]["actor/entropy"] for t in range(1, 11)]
    assert abs(sum(first_ten) / 10 - plan["entropy_start"]) > 0.01  # the definitions differ here


@pytest.mark.parametrize(
    ("stopped_by", "line"),
    [
        ({"alert": 12, "detector": "kl_runaway"}, "stopped by alert #12 (kl_runaway)"),
        ({"command": 3, "requested_by": "alice"}, "stopped by a command from alice"),
    ],
)
def test_run_header_says_what_stopped_a_stopped_run(
    server: RunningServer, client: ApiClient, stopped_by: dict[str, Any], line: str
) -> None:
    run_id = new_run_id("cbstop")
    seed_run(server.url, run_id, steps=5)
    before = run_page.header(client.get_run(run_id))
    assert find_component(dash_html.Div(before), ids.RUN_STOPPED_BY) is None  # running
    body = {"status": "stopped", "summary": {"stopped_by": stopped_by, "loss": 0.1}}
    httpx.patch(f"{server.url}/api/v1/runs/{run_id}", json=body).raise_for_status()
    after = run_page.header(client.get_run(run_id))
    assert find_component(dash_html.Div(after), ids.RUN_STATUS).children == "stopped"
    assert find_component(dash_html.Div(after), ids.RUN_STOPPED_BY).children == line


@pytest.mark.parametrize(
    ("url", "linked"),
    [
        ("https://wandb.ai/team/grpo/runs/abc123", True),
        ("javascript:alert(1)", False),
        (" JavaScript:alert(1)", False),
        ("//wandb.ai/team/grpo/runs/abc123", False),
        (None, False),  # offline: W&B has no page for the run
    ],
)
def test_run_header_links_the_wandb_run_only_at_an_http_url(
    server: RunningServer, client: ApiClient, url: str | None, linked: bool
) -> None:
    run_id = new_run_id("cbwandb")
    seed_run(server.url, run_id, steps=5, config={"wandb": {"id": "abc123", "url": url}})
    link = find_component(
        dash_html.Div(run_page.header(client.get_run(run_id))), ids.RUN_WANDB_LINK
    )
    if linked:
        assert (link.children, link.href, link.target) == ("W&B run", url, "_blank")
    else:
        assert link is None

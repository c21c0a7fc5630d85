"""Opening a page: it comes with the first layout, drawn in the reader's theme, with the shipped
plotly.js bundle, compressed; links and history still go through the page callback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dash
import httpx

from rlguard_frontend import plotly_bundle
from tests.conftest import new_run_id
from tests.frontend.helpers import WAIT_MS, graph_selector, seed_run
from tests.support.browser import POLL_MS

PLOTLY_BUNDLE = Path(str(plotly_bundle.bundle()))
DARK_PAPER = "#161b22"
DASH_PLOTLY = "_dash-component-suites/plotly/"  # where dcc.Graph fetches plotly.js lazily


def _entropy_drawn(page: Any) -> None:
    entropy = f"document.querySelector(`{graph_selector('entropy')}`)"
    page.wait_for_function(
        f"({entropy}?.data?.[0]?.x?.length ?? 0) > 0", timeout=WAIT_MS, polling=POLL_MS
    )


def _record_answers(page: Any, route: str) -> list[Any]:
    """The responses to ``route`` (``_dash-layout``, ``_dash-update-component``) from now on."""
    answers: list[Any] = []

    def keep(response: Any) -> None:
        if response.url.split("?")[0].endswith(route):
            answers.append(response)

    page.on("response", keep)
    return answers


def _callback_output(request: Any) -> str:
    """A Dash callback request's ``output`` ("" for any other request)."""
    if not request.url.split("?")[0].endswith("_dash-update-component"):
        return ""
    return str(json.loads(request.post_data or "{}").get("output", ""))


def test_run_page_comes_drawn_with_the_first_layout(dashboard: Any, page: Any) -> None:
    run_id = new_run_id("first")
    seed_run(dashboard.url, run_id)
    layouts = _record_answers(page, "_dash-layout")
    callbacks = _record_answers(page, "_dash-update-component")
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    posted: list[str] = []  # the outputs each callback request asks for
    page.on("request", lambda r: posted.append(_callback_output(r)))
    page.goto(f"{dashboard.url}/runs/{run_id}")
    _entropy_drawn(page)
    layout = layouts[0].text()
    assert run_id in layout and '"figure"' in layout
    pages_sent = [r for r in callbacks if r.status == 200 and '"app-page"' in r.text()]
    assert pages_sent == [], "the page callback must not build the page the layout brought"
    lazy = [url for url in requests if DASH_PLOTLY in url]
    assert not lazy, "dcc.Graph fetched Dash's plotly.js: the page's bundle was not loaded first"
    assert page.evaluate("Plotly.version") == plotly_bundle.VERSION
    # Past the first tick (sent after anything the page's mount triggers), no callback was
    # asked to draw the panels again: the zoom store's mount once redrew them all (~0.4 MB).
    with page.expect_request(
        lambda r: "run-header.children" in _callback_output(r), timeout=WAIT_MS
    ):
        pass  # the next tick's refresh is sent (the interval keeps ticking)
    outputs = [o for o in posted if "run-panel-graph" in o and ".figure" in o]
    assert outputs == [], outputs
    assert page.console_errors == []


def test_dashboard_links_and_history_switch_pages(dashboard: Any, page: Any) -> None:
    run_id = new_run_id("nav")
    seed_run(dashboard.url, run_id, steps=30)
    page.goto(f"{dashboard.url}/runs/{run_id}")
    _entropy_drawn(page)
    page.click("nav >> text=Runs")
    page.get_by_text("1 run", exact=True).wait_for(timeout=WAIT_MS)
    page.click("nav >> text=Compare")
    page.get_by_text("Pick two or more runs.").wait_for(timeout=WAIT_MS)
    page.go_back()
    page.get_by_text("1 run", exact=True).wait_for(timeout=WAIT_MS)
    page.go_back()
    _entropy_drawn(page)
    assert page.locator(".run-title").inner_text() == "grpo-demo"
    assert page.console_errors == []


def test_run_page_reached_from_the_runs_grid_draws_with_dashs_lazy_plotly(
    dashboard: Any, page: Any
) -> None:
    run_id = new_run_id("lazy")
    seed_run(dashboard.url, run_id, steps=30)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(f"{dashboard.url}/")
    page.get_by_text("1 run", exact=True).wait_for(timeout=WAIT_MS)
    assert page.evaluate("typeof window.Plotly") == "undefined"  # the grid draws no chart
    page.evaluate(  # what a link does: dcc.Location follows the history
        "path => { history.pushState({}, '', path); dispatchEvent(new PopStateEvent('popstate')) }",
        f"/runs/{run_id}",
    )
    _entropy_drawn(page)
    assert any(DASH_PLOTLY in url for url in requests), "dcc.Graph loaded Dash's copy"
    assert page.console_errors == []


def test_run_page_first_drawn_in_the_theme_last_chosen(dashboard: Any, page: Any) -> None:
    run_id = new_run_id("theme")
    seed_run(dashboard.url, run_id, steps=30)
    page.goto(f"{dashboard.url}/runs/{run_id}")
    _entropy_drawn(page)
    page.click("#app-theme-toggle")
    paper = f"document.querySelector(`{graph_selector('entropy')}`).layout.paper_bgcolor"
    page.wait_for_function(f"{paper} === '{DARK_PAPER}'", timeout=WAIT_MS, polling=POLL_MS)
    layouts = _record_answers(page, "_dash-layout")
    page.reload()
    _entropy_drawn(page)
    assert DARK_PAPER in layouts[0].text(), "the server drew the first page in the dark theme"
    assert page.evaluate(paper) == DARK_PAPER
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    assert page.console_errors == []


def test_dashboard_sends_its_plotly_bundle_compressed(dashboard: Any) -> None:
    bundle = PLOTLY_BUNDLE.read_bytes()
    url = plotly_bundle.script_url("/")
    assert url is not None and plotly_bundle.VERSION in url
    with httpx.Client(base_url=dashboard.url, timeout=10) as http:
        answer = http.get(url, headers={"accept-encoding": "gzip"})
        pages = {path: http.get(path).text for path in ("/", "/alerts", "/runs/r1", "/compare")}
    assert answer.headers["content-encoding"] == "gzip"
    assert "immutable" in answer.headers["cache-control"]
    assert answer.num_bytes_downloaded < len(bundle) // 2
    assert answer.content == bundle
    assert f'src="{url}"' in pages["/runs/r1"]  # loaded up front, with the page's other scripts
    assert f'src="{url}"' in pages["/compare"]
    assert url not in pages["/"] and url not in pages["/alerts"]  # no charts: no plotly.js


def test_shipped_plotly_bundle_is_the_version_its_url_names() -> None:
    # The URL is cached by browsers for good: it must change whenever the file does. (The
    # ``plotly`` package's own plotly.js may be newer: the figures are plain dicts.)
    head = PLOTLY_BUNDLE.read_text()[:200]
    assert f"plotly.js (basic - minified) v{plotly_bundle.VERSION}" in head


def test_dashboard_sends_dashs_scripts_compressed_and_whole(dashboard: Any) -> None:
    script = Path(dash.__file__).parent / "dcc" / "async-graph.js"
    url = "/_dash-component-suites/dash/dcc/async-graph.js"
    # Dash answers any cache-busting fingerprint with the same file: the same gzip for each.
    fingerprinted = [url.replace(".js", f".v1_0m{n}.js") for n in range(2)]
    other = "/_dash-component-suites/dash/dcc/async-markdown.js"
    with httpx.Client(base_url=dashboard.url, timeout=10) as http:
        gzip_please = {"accept-encoding": "gzip"}
        answers = [http.get(u, headers=gzip_please) for u in [url, url, *fingerprinted]]
        plain = http.get(url, headers={"accept-encoding": "identity"})
        another = http.get(other, headers=gzip_please)
    assert [a.headers["content-encoding"] for a in answers] == ["gzip"] * 4
    assert answers[0].num_bytes_downloaded < len(script.read_bytes()) // 2
    assert {a.content for a in answers} == {plain.content} == {script.read_bytes()}
    assert "content-encoding" not in plain.headers
    assert another.content == (script.parent / "async-markdown.js").read_bytes()


def _ids(node: Any) -> list[str]:
    """Every component id in a layout's JSON (dict ids as their JSON text)."""
    if isinstance(node, list):
        return [found for item in node for found in _ids(item)]
    if not isinstance(node, dict):
        return []
    props = node.get("props", {})
    own = [] if "id" not in props else [json.dumps(props["id"], sort_keys=True)]
    return own + [found for value in props.values() for found in _ids(value)]


def test_run_page_layout_has_each_component_id_once(dashboard: Any) -> None:
    """The renderer wires callbacks by id: two components of one id (the live points' store
    and the live switch were both ``run-live``) leave one of them unwired."""
    run_id = new_run_id("ids")
    seed_run(dashboard.url, run_id)
    answer = httpx.get(
        f"{dashboard.url}/_dash-layout",
        headers={"Referer": f"{dashboard.url}/runs/{run_id}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text[:500]
    found = _ids(answer.json())
    assert json.dumps("run-id") in found  # the run page came with the layout
    assert sorted({i for i in found if found.count(i) > 1}) == []

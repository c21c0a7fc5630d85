"""Locations, the page each shows, and the page a layout request comes from (table-driven)."""

from __future__ import annotations

import pytest

from rlguard_frontend import ids, routing
from rlguard_frontend.api_client import ApiClient

UNREACHABLE_API = "http://127.0.0.1:9/api"  # nothing listens on port 9: the page shows why


@pytest.mark.parametrize(
    ("path", "query", "prefix", "expected"),
    [
        ("/runs/abc", "", "/", "/runs/abc"),
        ("/runs/abc", None, "/", "/runs/abc"),
        (None, None, "/", "/"),
        ("/compare", "runs=a,b", "/", "/compare?runs=a,b"),
        ("/compare", "?runs=a,b", "/", "/compare?runs=a,b"),
        ("/dash/runs/abc", "", "/dash/", "/runs/abc"),
        ("/dash/", "", "/dash/", "/"),
    ],
)
def test_location_is_path_below_prefix_with_query(
    path: str | None, query: str | None, prefix: str, expected: str
) -> None:
    assert routing.location(path, query, prefix) == expected


@pytest.mark.parametrize(
    ("headers", "prefix", "expected"),
    [
        ({"Referer": "http://host:8000/runs/abc"}, "/", "/runs/abc"),
        ({"Referer": "http://host:8000/runs/a%2Bb"}, "/", "/runs/a+b"),
        ({"Referer": "http://host:8000/compare?runs=a,b"}, "/", "/compare?runs=a,b"),
        ({"Referer": "http://host:8000/"}, "/", "/"),
        ({"Referer": "http://host:8000/dash/runs/abc"}, "/dash/", "/runs/abc"),
        ({"Referer": "http://host:8000/elsewhere"}, "/dash/", None),
        ({}, "/", None),
        ({"Referer": ""}, "/", None),
    ],
)
def test_referring_location_reads_the_referer(
    headers: dict[str, str], prefix: str, expected: str | None
) -> None:
    assert routing.referring_location(headers, prefix) == expected


@pytest.mark.parametrize(
    ("cookies", "expected"),
    [({}, "light"), ({"rlguard_theme": "dark"}, "dark"), ({"rlguard_theme": "neon"}, "light")],
)
def test_theme_from_cookies_accepts_known_themes_only(
    cookies: dict[str, str], expected: str
) -> None:
    assert routing.theme_from(cookies) == expected


@pytest.mark.parametrize(
    ("where", "wanted"),
    [
        ("/", ids.RUNS_TABLE),
        ("/compare?runs=a,b", ids.COMPARE_RUNS),
        ("/runs/abc", ids.RUN_PANELS),
    ],
)
def test_page_for_picks_the_page_of_a_location(where: str, wanted: str) -> None:
    page = routing.page_for(ApiClient(UNREACHABLE_API), where, "light")
    assert page[wanted] is not None  # Dash components index their tree by id


def test_page_for_compare_preselects_the_runs_of_the_query() -> None:
    page = routing.page_for(ApiClient(UNREACHABLE_API), "/compare?runs=a,b", "light")
    assert page[ids.COMPARE_RUNS].value == ["a", "b"]


def test_page_for_run_page_says_why_the_api_did_not_answer() -> None:
    page = routing.page_for(ApiClient(UNREACHABLE_API), "/runs/abc", "light")
    assert page[ids.RUN_ID].data == "abc"
    assert "cannot reach the rlguard API" in page[ids.RUN_ERROR].children


def test_page_for_unknown_path_shows_not_found() -> None:
    page = routing.page_for(ApiClient(UNREACHABLE_API), "/nope", "light")
    assert "Page not found" in str(page.to_plotly_json())


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("/", False),
        ("/alerts", False),
        ("/runs/abc/samples?step=3", False),
        ("/runs/", False),
        ("/runs/abc", True),
        ("/compare?runs=a,b", True),
        ("/compare/", True),
    ],
)
def test_only_the_run_and_compare_pages_draw_charts(where: str, expected: bool) -> None:
    assert routing.draws_charts(where) is expected

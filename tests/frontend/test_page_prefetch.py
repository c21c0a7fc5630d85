"""PagePrefetch with real threads: builds started by a page's HTML, taken by its layout."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from rlguard_frontend.page_prefetch import PREFETCH_TTL_S, Key, PagePrefetch

RUN_PAGE: Key = ("/runs/abc", "light")


def describe(key: Key) -> str:
    return f"{key[0]} in {key[1]}"


def test_page_prefetch_take_returns_started_build_once() -> None:
    prefetch = PagePrefetch(describe)
    prefetch.start(RUN_PAGE)
    assert prefetch.take(RUN_PAGE) == "/runs/abc in light"
    assert prefetch.take(RUN_PAGE) is None


def test_page_prefetch_take_without_start_returns_none() -> None:
    prefetch = PagePrefetch(describe)
    prefetch.start(RUN_PAGE)
    assert prefetch.take(("/runs/abc", "dark")) is None
    assert prefetch.take(("/runs/other", "light")) is None


def test_page_prefetch_hands_out_two_builds_of_one_page_oldest_first() -> None:
    built: list[int] = []

    def count(_key: Key) -> int:
        built.append(len(built))
        return built[-1]

    prefetch = PagePrefetch(count)
    prefetch.start(RUN_PAGE)
    prefetch.start(RUN_PAGE)
    assert sorted([prefetch.take(RUN_PAGE), prefetch.take(RUN_PAGE)]) == [0, 1]
    assert prefetch.take(RUN_PAGE) is None


def test_page_prefetch_take_raises_what_the_build_raised() -> None:
    def fail(_key: Key) -> str:
        raise ValueError("no such run")

    prefetch = PagePrefetch(fail)
    prefetch.start(RUN_PAGE)
    with pytest.raises(ValueError, match="no such run"):
        prefetch.take(RUN_PAGE)


def test_page_prefetch_drops_builds_older_than_ttl() -> None:
    now = [100.0]
    prefetch = PagePrefetch(describe, clock=lambda: now[0])
    prefetch.start(RUN_PAGE)
    now[0] += PREFETCH_TTL_S + 0.1
    assert prefetch.take(RUN_PAGE) is None


def test_page_prefetch_take_waits_for_a_build_in_progress() -> None:
    started, release = threading.Event(), threading.Event()

    def slow(key: Key) -> str:
        started.set()
        release.wait(timeout=10)
        return describe(key)

    prefetch = PagePrefetch(slow)
    prefetch.start(RUN_PAGE)
    assert started.wait(timeout=10)
    taken: list[str | None] = []
    taker = threading.Thread(target=lambda: taken.append(prefetch.take(RUN_PAGE)))
    taker.start()
    release.set()
    taker.join(timeout=10)
    assert taken == ["/runs/abc in light"]


def blocked_until(release: threading.Event) -> Callable[[Key], str]:
    def build(key: Key) -> str:
        release.wait(timeout=10)
        return key[0]

    return build


def test_page_prefetch_starts_no_build_while_every_worker_is_busy() -> None:
    release = threading.Event()
    prefetch = PagePrefetch(blocked_until(release), workers=2)
    keys = [(f"/runs/r{i}", "light") for i in range(3)]
    for key in keys:
        prefetch.start(key)
    release.set()
    assert [prefetch.take(key) for key in keys] == ["/runs/r0", "/runs/r1", None]


def test_page_prefetch_keeps_no_more_than_max_pending_builds() -> None:
    release = threading.Event()
    prefetch = PagePrefetch(blocked_until(release), workers=5, max_pending=3)
    keys = [(f"/runs/r{i}", "light") for i in range(5)]
    for key in keys:
        prefetch.start(key)
    release.set()
    assert [prefetch.take(key) for key in keys] == ["/runs/r0", "/runs/r1", "/runs/r2", None, None]

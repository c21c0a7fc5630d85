"""Which page a location shows, and which page a request for the app's layout comes from.

A location here is the decoded path below the app's prefix plus the raw query, e.g.
``"/runs/my run"`` or ``"/compare?runs=a,b"``: the browser's URL, the page's HTML request and
the layout request's ``Referer`` all reduce to the same string.

A run's pages name it by its id, its name or ``project/name`` (``/runs/grpo/seed0/samples``);
the name is read into the id once, here, and the pages work with the id.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qs, unquote, urlsplit

from dash import html
from dash.exceptions import PreventUpdate

from rlguard_backend.schemas import RunPublic
from rlguard_frontend.api_client import ApiClient, ApiError
from rlguard_frontend.pages import inbox, not_found_404, policies, webhooks
from rlguard_frontend.pages.compare import page as compare
from rlguard_frontend.pages.run import page as run_detail
from rlguard_frontend.pages.runs import page as runs
from rlguard_frontend.pages.samples import page as samples

THEMES = ("light", "dark")
THEME_COOKIE = "rlguard_theme"  # mirrors the theme store: the server draws a first page in it


def location(path: str | None, query: str | None, prefix: str = "/") -> str:
    """``path`` (decoded) below ``prefix``, with ``?query`` when there is one."""
    below = (path or "/").removeprefix(prefix.rstrip("/")) or "/"
    query = (query or "").lstrip("?")
    return f"{below}?{query}" if query else below


def page_for(client: ApiClient, where: str, theme: str | None) -> html.Div:
    """The page at a ``location``."""
    path, _, query = where.partition("?")
    if path == "/":
        return runs.layout(query, client)
    if path.startswith("/runs/") and len(path) > len("/runs/"):
        return _run_page(client, path.removeprefix("/runs/"), theme, query)
    if path.rstrip("/") == "/alerts":
        return inbox.layout(client.can_write())
    if path.rstrip("/") == "/compare":
        return compare.layout(query, client, theme)
    if path.rstrip("/") == "/policies":
        return policies.layout(query, client.can_write())
    if path.rstrip("/") == webhooks.PATH:
        return webhooks.layout(client)
    return not_found_404.layout(path)


def _run_page(client: ApiClient, below: str, theme: str | None, query: str) -> html.Div:
    """The run page or its samples page, the run named by id, name or project/name."""
    ref, on_samples = below.removesuffix("/samples"), below.endswith("/samples")
    try:
        run: RunPublic | str = client.get_run(ref)
    except ApiError as exc:
        if exc.status_code == 409:  # a name several runs share: the sentence lists them
            return not_found_404.layout(f"/runs/{below}", exc.detail)
        # Not there yet (a trainer about to create it), or the API is away: the page says so
        # and its tick tries again.
        run = ref
    if on_samples:
        return samples.layout(run, query)
    return run_detail.layout(run if isinstance(run, str) else run.id, client, theme, query)


def draws_charts(where: str) -> bool:
    """Whether the page at a ``location`` draws plotly charts (the run and compare pages)."""
    path = where.partition("?")[0]
    if path.rstrip("/") == "/compare":
        return True
    run_page = path.startswith("/runs/") and len(path) > len("/runs/")
    return run_page and not path.endswith("/samples")


def referring_location(headers: Mapping[str, str], prefix: str = "/") -> str | None:
    """The location of the page that asked, from the ``Referer`` a same-origin fetch carries.

    ``None`` without one, or when it names no page of this app.
    """
    referrer = headers.get("Referer")
    if not referrer:
        return None
    parts = urlsplit(referrer)
    if not parts.path.startswith(prefix):
        return None
    return location(unquote(parts.path), parts.query, prefix)


def theme_for(toggled: bool, search: str | None, theme: str | None) -> str:
    """The theme after a click on the toggle, or the one a link's ``?theme=`` asks for.

    >>> theme_for(True, "", "dark"), theme_for(False, "?theme=dark", "light")
    ('light', 'dark')
    """
    if toggled:
        return "light" if theme == "dark" else "dark"
    wanted = parse_qs((search or "").lstrip("?")).get("theme", [""])[-1]
    if wanted in THEMES and wanted != theme:
        return wanted
    raise PreventUpdate  # no change: nothing drawn in the theme is drawn again


def theme_from(cookies: Mapping[str, str]) -> str:
    """The theme the reader chose last (its cookie), light by default."""
    theme = cookies.get(THEME_COOKIE, "light")
    return theme if theme in THEMES else "light"

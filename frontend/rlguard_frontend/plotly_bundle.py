"""plotly.js's ``basic`` distribution (scatter, bar, pie), shipped here and served by the dashboard.

``dcc.Graph`` draws with ``window.Plotly`` when a script has loaded it; without one it fetches
Dash's full copy lazily, after the page has started. The page HTML of a page that draws charts
loads this bundle itself, with the other scripts, which saves that wait; pages without charts
(the runs grid, the inbox) do not load it at all. The dashboard draws scatter traces alone, so
it ships the ``basic`` distribution (``plotly.js-basic-dist-min`` on npm, MIT, in
``plotlyjs/``): 1.2 MB of script where the ``plotly`` package's full bundle is 4.8 MB, which
the browser took ~1 s to evaluate before Dash could start. A new trace type drawn anywhere
needs the full bundle back (or a distribution that has it). Browsers cache the bundle for good
(the URL names its ``VERSION``); the dashboard's server gzips it once (``serve``).
"""

from __future__ import annotations

import functools
from importlib import resources

import flask

ROUTE = "_rlguard/plotly-basic-{version}.min.js"
VERSION = "4.1.1"  # of the shipped bundle (its URL names it, so browsers never keep a stale one)
CACHE_FOR_S = 365 * 24 * 3600


def bundle() -> resources.abc.Traversable:
    """The shipped bundle's file."""
    return resources.files("rlguard_frontend") / "plotlyjs" / "plotly-basic.min.js"


def script_url(prefix: str) -> str | None:
    """Where the dashboard serves the bundle, or None when the install lacks it."""
    if not bundle().is_file():
        return None
    return prefix + ROUTE.format(version=VERSION)


def script_tag(url: str) -> str:
    """The ``<script>`` that loads the bundle, for a page's HTML."""
    return f'<script src="{url}"></script>'


@functools.cache
def _script() -> bytes:
    return bundle().read_bytes()


def install(server: flask.Flask, url: str) -> None:
    """Serve the bundle at ``url`` (from ``script_url``) on the dashboard's Flask server."""

    @server.route(url, endpoint="rlguard_plotly_js")
    def plotly_js() -> flask.Response:
        response = flask.Response(_script(), mimetype="text/javascript")
        response.headers["Cache-Control"] = f"public, max-age={CACHE_FOR_S}, immutable"
        return response

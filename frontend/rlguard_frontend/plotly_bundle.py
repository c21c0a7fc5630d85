"""plotly.js as the ``plotly`` package ships it, served by the dashboard once compressed.

``dcc.Graph`` draws with ``window.Plotly`` when a script has loaded it; without one it fetches
Dash's copy lazily, after the page has started. The page HTML of a page that draws charts
loads the bundle itself, with the other scripts, which saves that wait; pages without charts
(the runs grid, the inbox) do not load it at all: the full bundle is 4.8 MB of script
(1.5 MB gzip'd) that the browser would parse before Dash starts. Browsers cache the bundle for
good (the URL names its version); the dashboard's server gzips it once (``serve``).
"""

from __future__ import annotations

import functools
from importlib import resources

import flask

ROUTE = "_rlguard/plotly-{version}.min.js"
CACHE_FOR_S = 365 * 24 * 3600


def _bundle() -> resources.abc.Traversable:
    return resources.files("plotly") / "package_data" / "plotly.min.js"


def script_url(prefix: str) -> str | None:
    """Where the dashboard serves the bundle, or None when the package ships none."""
    if not _bundle().is_file():
        return None
    from plotly.offline import get_plotlyjs_version

    return prefix + ROUTE.format(version=get_plotlyjs_version())


def script_tag(url: str) -> str:
    """The ``<script>`` that loads the bundle, for a page's HTML."""
    return f'<script src="{url}"></script>'


@functools.cache
def _script() -> bytes:
    return _bundle().read_bytes()


def install(server: flask.Flask, url: str) -> None:
    """Serve the bundle at ``url`` (from ``script_url``) on the dashboard's Flask server."""

    @server.route(url, endpoint="rlguard_plotly_js")
    def plotly_js() -> flask.Response:
        response = flask.Response(_script(), mimetype="text/javascript")
        response.headers["Cache-Control"] = f"public, max-age={CACHE_FOR_S}, immutable"
        return response

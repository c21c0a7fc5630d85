"""The Dash application factory: navigation, one app-wide tick, and the pages' callbacks."""

from __future__ import annotations

from dash import Dash, Input, Output, dcc, html

from rlguard_frontend import ids
from rlguard_frontend.api_client import ApiClient
from rlguard_frontend.pages import not_found_404, runs

REFRESH_MS = 1000


def create_dash_app(api_url: str, *, requests_pathname_prefix: str = "/") -> Dash:
    """A dashboard reading the REST API at ``api_url`` (e.g. ``http://host:8000/api``)."""
    client = ApiClient(api_url)
    app = Dash(
        __name__,
        title="rlguard",
        requests_pathname_prefix=requests_pathname_prefix,
        suppress_callback_exceptions=True,
        update_title=None,
    )
    app.layout = html.Div(
        [
            dcc.Location(id=ids.URL),
            dcc.Interval(id=ids.TICK, interval=REFRESH_MS),
            html.Header([dcc.Link("rlguard", href="/", className="brand")], className="nav"),
            html.Main(id=ids.PAGE),
        ]
    )

    @app.callback(Output(ids.PAGE, "children"), Input(ids.URL, "pathname"))
    def show_page(pathname: str | None) -> html.Div:
        if pathname in (None, "", "/", requests_pathname_prefix):
            return runs.layout()
        return not_found_404.layout(pathname)

    runs.register(app, client)
    return app

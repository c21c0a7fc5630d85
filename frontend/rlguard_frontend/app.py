"""The Dash application factory: navigation, one app-wide tick, and the pages' callbacks."""

from __future__ import annotations

from urllib.parse import parse_qs, unquote

from dash import Dash, Input, Output, State, clientside_callback, dcc, html

from rlguard_frontend import ids
from rlguard_frontend.api_client import ApiClient
from rlguard_frontend.pages import compare, not_found_404, run_detail, runs

REFRESH_MS = 1000


def create_dash_app(api_url: str, *, requests_pathname_prefix: str = "/") -> Dash:
    """A dashboard reading the REST API at ``api_url`` (e.g. ``http://host:8000/api``)."""
    client = ApiClient(api_url)
    app = Dash(
        __name__,
        title="rlguard",
        requests_pathname_prefix=requests_pathname_prefix,
        suppress_callback_exceptions=True,
        update_title=None,  # type: ignore[arg-type]
    )
    app.layout = html.Div(
        [
            dcc.Location(id=ids.URL),
            dcc.Interval(id=ids.TICK, interval=REFRESH_MS),
            dcc.Store(id=ids.THEME, storage_type="local", data="light"),
            html.Header(
                [
                    dcc.Link("rlguard", href="/", className="brand"),
                    html.Nav([dcc.Link("Runs", href="/"), dcc.Link("Compare", href="/compare")]),
                    html.Button("◐ theme", id=ids.THEME_TOGGLE, className="button-small"),
                ],
                className="nav",
            ),
            html.Main(id=ids.PAGE),
        ]
    )

    @app.callback(
        Output(ids.PAGE, "children"),
        Input(ids.URL, "pathname"),
        State(ids.URL, "search"),
        State(ids.THEME, "data"),
    )
    def show_page(pathname: str | None, search: str | None, theme: str | None) -> html.Div:
        path = (pathname or "/").removeprefix(requests_pathname_prefix.rstrip("/")) or "/"
        if path == "/":
            return runs.layout()
        if path.startswith("/runs/") and len(path) > len("/runs/"):
            return run_detail.layout(unquote(path.removeprefix("/runs/")), client, theme)
        if path.rstrip("/") == "/compare":
            wanted = parse_qs((search or "").lstrip("?")).get("runs", [""])[0]
            return compare.layout([r for r in wanted.split(",") if r])
        return not_found_404.layout(path)

    @app.callback(
        Output(ids.THEME, "data"),
        Input(ids.THEME_TOGGLE, "n_clicks"),
        State(ids.THEME, "data"),
        prevent_initial_call=True,
    )
    def toggle_theme(_clicks: int | None, theme: str | None) -> str:
        return "light" if theme == "dark" else "dark"

    clientside_callback(
        "function(theme) { document.documentElement.dataset.theme = theme || 'light'; return ''; }",
        Output(ids.THEME_TOGGLE, "title"),
        Input(ids.THEME, "data"),
    )

    for page in (runs, run_detail, compare):
        page.register(app, client)
    return app

"""The Dash application factory: navigation, one app-wide tick, and the pages' callbacks.

The first layout comes with the page the browser opened (found from the layout request's
``Referer``, built while the browser starts Dash: a Flask hook on the page's HTML request starts
it); later navigation goes through ``show_page``, a callback on ``dcc.Location``.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import unquote

import flask
from dash import Dash, Input, Output, State, clientside_callback, ctx, dcc, html
from dash.exceptions import PreventUpdate

from rlguard_frontend import ids, plotly_bundle, routing, signin
from rlguard_frontend.api_client import ApiClient
from rlguard_frontend.page_prefetch import Key, PagePrefetch
from rlguard_frontend.pages import inbox, policies, webhooks
from rlguard_frontend.pages.compare import page as compare
from rlguard_frontend.pages.run import page as run_detail
from rlguard_frontend.pages.runs import page as runs
from rlguard_frontend.pages.samples import page as samples

REFRESH_MS = 1000
THEME_COOKIE_MAX_AGE_S = 365 * 24 * 3600
LAYOUT_ROUTE = "_dash-layout"

logger = logging.getLogger(__name__)


def _prefetch_pages(server: flask.Flask, prefetch: PagePrefetch, prefix: str) -> None:
    """Start building the page a browser opens as soon as it asks for the page's HTML.

    A Flask hook on the Dash app's server: a navigation (GET, accepting HTML) of a dashboard
    path; Dash's own requests (``_dash-…``), scripts and styles ask for other types.
    """

    @server.before_request
    def start_page_build() -> None:
        request = flask.request
        if request.method != "GET" or "text/html" not in request.headers.get("Accept", ""):
            return
        if request.path.startswith(f"{prefix}_dash-"):
            return
        query = request.query_string.decode("utf-8", "replace")
        where = routing.location(unquote(request.path), query, prefix)
        prefetch.start((where, routing.theme_from(request.cookies)))


class _Dashboard(Dash):
    """Dash whose page HTML loads plotly.js up front only for a page that draws charts."""

    plotly_js: str | None = None

    def interpolate_index(  # Dash's signature, which mypy holds an override to
        self,
        metas: Any = "",
        title: Any = "",
        css: Any = "",
        config: Any = "",
        scripts: Any = "",
        app_entry: Any = "",
        favicon: Any = "",
        renderer: Any = "",
    ) -> Any:
        """The page's HTML, with the plotly.js bundle before Dash's scripts where it is drawn."""
        if self.plotly_js and _opens_charts(self.config.requests_pathname_prefix):
            scripts = plotly_bundle.script_tag(self.plotly_js) + scripts
        return super().interpolate_index(
            metas, title, css, config, scripts, app_entry, favicon, renderer
        )


def _opens_charts(prefix: str) -> bool:
    """Whether the page whose HTML is being sent draws charts."""
    request = flask.request
    query = request.query_string.decode("utf-8", "replace")
    return routing.draws_charts(routing.location(unquote(request.path), query, prefix))


def create_dash_app(
    api_url: str,
    *,
    requests_pathname_prefix: str = "/",
    sign_in: bool = False,
    token: str | None = None,
    trust: signin.ProxyTrust | None = None,
) -> Dash:
    """A dashboard reading the REST API at ``api_url`` (e.g. ``http://host:8000/api``).

    ``sign_in``: viewers sign in with their own API token (see ``signin``); otherwise every
    API call sends ``token`` (or none). ``trust``: viewers an SSO proxy identifies need no
    sign-in, and their calls send ``token``.
    """
    client = ApiClient(api_url, token)
    prefix = requests_pathname_prefix
    plotly_js = plotly_bundle.script_url(prefix)
    app = _Dashboard(
        __name__,
        title="rlguard",
        requests_pathname_prefix=prefix,
        suppress_callback_exceptions=True,
        update_title=None,  # type: ignore[arg-type]
    )
    if plotly_js:
        app.plotly_js = plotly_js
        plotly_bundle.install(app.server, plotly_js)

    def build(key: Key) -> html.Div:
        return routing.page_for(client, *key)

    prefetch = PagePrefetch(build)

    def first_page() -> tuple[Any, str | None, str]:
        """The page the browser opened, its location and the theme, when this is its layout."""
        if not flask.has_request_context():  # Dash validating the layout at start-up
            return None, None, routing.theme_from({})
        request = flask.request
        theme = routing.theme_from(request.cookies)
        if not request.path.endswith(LAYOUT_ROUTE):  # not the layout: no page was opened
            return None, None, theme
        opened = routing.referring_location({"Referer": request.headers.get("Referer", "")}, prefix)
        if opened is None:
            return None, None, theme
        try:
            page = prefetch.take((opened, theme))
            if page is None:  # no build started for it (or it expired): build it now
                page = build((opened, theme))
        except Exception:  # the layout must load: show_page builds the page, and shows the error
            logger.exception("could not build the page for %s", opened)
            return None, None, theme
        return page, opened, theme

    def shell() -> html.Div:
        page, opened, theme = first_page()
        return html.Div(
            [
                dcc.Location(id=ids.URL, refresh="callback-nav"),
                dcc.Interval(id=ids.TICK, interval=REFRESH_MS),
                dcc.Store(id=ids.THEME, storage_type="local", data=theme),
                dcc.Store(id=ids.PAGE_SHOWN, data=opened),
                html.Header(
                    [
                        dcc.Link("rlguard", href="/", className="brand"),
                        html.Nav(
                            [
                                dcc.Link("Runs", href="/"),
                                dcc.Link("Alerts", href="/alerts"),
                                dcc.Link("Compare", href="/compare"),
                                dcc.Link("Policies", href="/policies"),
                                dcc.Link("Webhooks", href=webhooks.PATH),
                            ]
                        ),
                        html.Button("◐ theme", id=ids.THEME_TOGGLE, className="button-small"),
                        *sign_out,
                    ],
                    className="nav",
                ),
                html.Main(page, id=ids.PAGE),
            ]
        )

    app.layout = shell
    sign_out: list[Any] = []
    if sign_in:  # before the prefetch: a page is built only for a signed-in viewer
        signin.install(app.server, client, prefix, trust)
        sign_out.append(
            html.Form(
                html.Button("sign out", id=ids.SIGN_OUT, className="button-small"),
                action=f"{prefix}logout",
                method="post",
            )
        )

    _prefetch_pages(app.server, prefetch, prefix)

    @app.callback(
        Output(ids.PAGE, "children"),
        Output(ids.PAGE_SHOWN, "data"),
        Input(ids.URL, "pathname"),
        Input(ids.URL, "search"),  # back/forward between two views of one page
        State(ids.THEME, "data"),
        State(ids.PAGE_SHOWN, "data"),
    )
    def show_page(
        pathname: str | None, search: str | None, theme: str | None, shown: str | None
    ) -> tuple:
        if pathname is None and shown is not None:
            raise PreventUpdate  # the URL component has not reported yet; the layout has a page
        wanted = routing.location(unquote(pathname or "/"), search, prefix)
        if wanted == shown:
            raise PreventUpdate  # the layout came with this page
        return routing.page_for(client, wanted, theme), wanted

    @app.callback(
        Output(ids.THEME, "data"),
        Input(ids.THEME_TOGGLE, "n_clicks"),
        Input(ids.URL, "search"),
        State(ids.THEME, "data"),
    )
    def choose_theme(_clicks: int | None, search: str | None, theme: str | None) -> str:
        return routing.theme_for(ctx.triggered_id == ids.THEME_TOGGLE, search, theme)

    clientside_callback(
        f"""function(theme) {{
            theme = theme || 'light';
            document.documentElement.dataset.theme = theme;
            document.cookie = '{routing.THEME_COOKIE}=' + theme
                + '; path={prefix}; max-age={THEME_COOKIE_MAX_AGE_S}; SameSite=Lax';
            return '';
        }}""",
        Output(ids.THEME_TOGGLE, "title"),
        Input(ids.THEME, "data"),
    )

    for page in (runs, run_detail, compare, samples, inbox, policies, webhooks):
        page.register(app, client)
    return app

"""Shown for any path no page claims."""

from __future__ import annotations

from dash import dcc, html


def layout(pathname: str, why: str = "") -> html.Div:
    """The page shown for a path no page serves (``why``: the API's sentence, for a run)."""
    said = [html.P(why, id="not-found-why", className="error")] if why else []
    return html.Div(
        [html.H2("Page not found"), html.P(pathname), *said, dcc.Link("All runs", href="/")]
    )

"""Shown for any path no page claims."""

from __future__ import annotations

from dash import dcc, html


def layout(pathname: str) -> html.Div:
    """The page shown for a path no page serves."""
    return html.Div([html.H2("Page not found"), html.P(pathname), dcc.Link("All runs", href="/")])

"""The controls bar shared by the run and compare pages: smoothing, log scale, x axis, live."""

from __future__ import annotations

from dash import dcc, html

from rlguard_frontend import ids

X_OPTIONS = [
    {"label": "step", "value": "step"},
    {"label": "wall time", "value": "wall"},
    {"label": "relative", "value": "relative"},
]


def control_id(prefix: str, name: str) -> str:
    """The id of a page's control: ``<page prefix>-<control>``."""
    return f"{prefix}-{name}"


def controls_bar(
    prefix: str,
    *,
    live: bool,
    extra: list | None = None,
    smoothing: float = 0.0,
    log: bool = False,
    xmode: str = "step",
) -> html.Div:
    """Smoothing slider, log toggle, x-axis choice and (on a run page) the live switch."""
    items = [
        html.Label(
            [
                html.Span("smoothing", className="control-label"),
                dcc.Slider(
                    id=control_id(prefix, ids.SMOOTHING),
                    min=0,
                    max=0.99,
                    step=0.01,
                    value=smoothing,
                    marks={0: "off", 0.5: "0.5", 0.8: "0.8", 0.95: "0.95"},
                    tooltip={"placement": "bottom"},
                    updatemode="mouseup",
                ),
            ],
            className="control control-smoothing",
        ),
        dcc.Checklist(
            id=control_id(prefix, ids.LOG),
            options=[{"label": " log y", "value": "log"}],
            value=["log"] if log else [],
            className="control",
        ),
        html.Div(
            [
                html.Span("x axis", className="control-label"),
                dcc.RadioItems(
                    id=control_id(prefix, ids.XAXIS),
                    options=X_OPTIONS,
                    value=xmode,
                    inline=True,
                ),
            ],
            className="control",
        ),
    ]
    if live:
        items.append(
            dcc.Checklist(
                id=control_id(prefix, ids.LIVE),
                options=[{"label": " live", "value": "live"}],
                value=["live"],
                className="control control-live",
            )
        )
    return html.Div(items + (extra or []), className="controls")

"""The samples page's views (pure): the table of a step's samples, one sample's prompt and
response side by side, the response's tokens coloured by their KL or entropy.

Every text goes into the page as a Dash string child, which React renders as text: a sample
that holds markup shows the markup, never runs it.
"""

from __future__ import annotations

import math
from typing import Any

from dash import html
from dash.dash_table.DataTable import DataTable

from rlguard_backend.schemas import SamplePublic
from rlguard_frontend import ids

NUMBERS = ("reward", "advantage", "length", "kl", "entropy")
PREVIEW_CHARS = 120
TOKEN_SIGNALS = ("kl", "entropy", "logprobs")


def _number(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.4g}"


COLUMNS: list[Any] = [
    {"name": "#", "id": "index"},
    *({"name": name, "id": name} for name in NUMBERS),
    {"name": "response", "id": "response"},
]
ROWS_PER_PAGE = 250  # the page lists at most 200


def rows(samples: list[SamplePublic]) -> list[Any]:
    """The table's rows: index, numbers and the start of the response as text, and which
    sample each is (run, step, index, split: the detail reads it again, with its tokens)."""
    return [
        {
            "index": str(sample.index),
            **{name: _number(getattr(sample, name)) for name in NUMBERS},
            "response": _preview(sample.response),
            "run_id": sample.run_id,
            "step": sample.step,
            "sample_index": sample.index,
            "split": sample.split,
        }
        for sample in samples
    ]


def table(samples: list[SamplePublic], table_id: str) -> DataTable:
    """One row per sample, as one DataTable: 200 rows of html cells cost the browser seconds
    to draw (a Dash component each), a DataTable draws them at once. Cells hold text only."""
    return DataTable(
        id=table_id,
        columns=COLUMNS,
        data=rows(samples),
        page_size=ROWS_PER_PAGE,
        style_as_list_view=True,
        style_cell={"textAlign": "left", "padding": "3px 6px", "fontSize": "13px"},
        style_header={"fontWeight": "bold"},
        css=[{"selector": "td", "rule": "cursor: pointer"}],
    )


def selected_style(position: int | None) -> list[dict[str, Any]]:
    """The table's style for the selected row."""
    if position is None:
        return []
    return [{"if": {"row_index": position}, "backgroundColor": "var(--chip)"}]


def _preview(text: str | None) -> str:
    text = (text or "").replace("\n", " ⏎ ")
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"


def detail(sample: SamplePublic, colour_by: str) -> html.Div:
    """Prompt and response side by side, the numbers, and the coloured tokens when given."""
    numbers = [
        html.Span(f"{n} {_number(getattr(sample, n))}", className="sample-number")
        for n in (*NUMBERS, "truncated", "logprob")
    ]
    sides = [
        html.Div([html.H5("Prompt"), html.Pre(sample.prompt or "", id=ids.SAMPLE_PROMPT)]),
        html.Div([html.H5("Response"), html.Pre(sample.response or "", id=ids.SAMPLE_RESPONSE)]),
    ]
    if sample.reference or sample.ground_truth:
        text = sample.reference or sample.ground_truth or ""
        sides.append(html.Div([html.H5("Reference"), html.Pre(text)]))
    parts: list[Any] = [
        html.H4(f"step {sample.step} · sample {sample.index}" + (" · cut" if sample.cut else "")),
        html.Div(numbers, className="sample-numbers"),
        html.Div(sides, className="sample-sides"),
    ]
    coloured = tokens(sample, colour_by)
    if coloured is not None:
        parts += [html.H5(f"Response tokens by {colour_by}"), coloured]
    return html.Div(parts, className="sample-detail")


def tokens(sample: SamplePublic, colour_by: str) -> html.Div | None:
    """The response's tokens, each shaded by ``colour_by`` against the sample's largest value."""
    arrays = sample.tokens
    if arrays is None or not arrays.text:
        return None
    values = list(getattr(arrays, colour_by, None) or [])
    values += [None] * (len(arrays.text) - len(values))  # arrays may be shorter than the text
    finite = [abs(v) for v in values if v is not None and math.isfinite(v)]
    top = max(finite, default=0.0) or 1.0
    spans = [
        html.Span(
            text,
            title=f"{colour_by} {_number(value)}",
            className="token",
            style={"backgroundColor": _shade(value, top)},
        )
        for text, value in zip(arrays.text, values, strict=False)
    ]
    return html.Div(spans, id=ids.SAMPLE_TOKENS, className="sample-tokens")


def _shade(value: float | None, top: float) -> str:
    if value is None or not math.isfinite(value):
        return "transparent"
    return f"rgba(214, 39, 40, {min(abs(value) / top, 1.0) * 0.85:.3f})"

"""The samples page's views (pure): the table of a step's samples, one sample's prompt and
response side by side, the response's tokens coloured by their KL or entropy.

Every text goes into the page as a Dash string child, which React renders as text: a sample
that holds markup shows the markup, never runs it.
"""

from __future__ import annotations

import math
from typing import Any

from dash import html

from rlguard_backend.schemas import SamplePublic
from rlguard_frontend import ids

NUMBERS = ("reward", "advantage", "length", "kl", "entropy")
PREVIEW_CHARS = 120
TOKEN_SIGNALS = ("kl", "entropy", "logprobs")


def _number(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.4g}"


def table(
    samples: list[SamplePublic], selected: int | None, row_type: str = ids.SAMPLE_ROW
) -> html.Table:
    """One row per sample: its index, numbers and the start of its response; rows are buttons."""
    head = html.Tr([html.Th("#"), *(html.Th(n) for n in NUMBERS), html.Th("response")])
    rows = [
        html.Tr(
            [
                html.Td(str(sample.index)),
                *(html.Td(_number(getattr(sample, n))) for n in NUMBERS),
                html.Td(_preview(sample.response), className="sample-preview"),
            ],
            id={"type": row_type, "index": position},
            n_clicks=0,
            className="sample-row selected" if position == selected else "sample-row",
        )
        for position, sample in enumerate(samples)
    ]
    return html.Table([html.Thead(head), html.Tbody(rows)], className="samples-table")


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
    values = getattr(arrays, colour_by, None) or [None] * len(arrays.text)
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

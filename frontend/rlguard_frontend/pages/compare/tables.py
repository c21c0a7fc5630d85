"""The compare page's tables and names: the delta table, the config diff, legend labels.

Built from what ``compare_data`` works out, no callbacks; the tables are Markdown (one Dash
component each) with every name and config value escaped to literal text (the numbers, formatted
here, need no escaping).
"""

from __future__ import annotations

import re
from typing import Any

from dash import dcc, html

from rlguard_frontend.pages.compare import data as compare_data


def group_label(key: dict[str, Any], runs: int) -> str:
    """``"lr=0.001 · 5 runs"``: the group's values without the ``config.`` prefix."""
    values = ", ".join(f"{k.removeprefix('config.')}={v}" for k, v in key.items()) or "all runs"
    return f"{values} · {runs} run" + ("" if runs == 1 else "s")


def run_labels(names: dict[str, str | None]) -> dict[str, str]:
    """Legend names: the run's name, disambiguated by its id when two runs share one."""
    counts: dict[str, int] = {}
    for name in names.values():
        counts[name or ""] = counts.get(name or "", 0) + 1
    return {
        run_id: (name if name and counts[name] == 1 else f"{name} ({run_id})" if name else run_id)
        for run_id, name in names.items()
    }


# Which way a signal is better, for colouring its change: +1 higher is better, -1 lower is
# better. Entropy and length are left out: either way can be the failure (collapse or blow-up,
# hacking or truncation), so their changes stay neutral.
BETTER = {
    "reward_mean": +1,
    "ppo_kl": -1,
    "kl_loss": -1,
    "reward_kl_penalty": -1,
    "kl_ref_seq": -1,
    "clipfrac": -1,
    "grad_norm": -1,
    "rollout_kl": -1,
    "rollout_logprob_diff": -1,
    "sample_degenerate": -1,
    "sample_repetition": -1,
}


def delta_table(signals: list[str], rows: list[dict[str, Any]], labels: dict[str, str]) -> Any:
    """Last values and their % difference from the baseline run, coloured by whether the change
    is good for that signal (green), bad (orange), or neither (plain)."""
    if not signals:
        return []
    body = []
    for row in rows:
        name = labels.get(row["run"], row["run"])
        cells = [markdown_text(name + (" (baseline)" if row["baseline"] else ""))]
        for signal in signals:
            value, change = row[signal]
            cells.append(_delta_cell(value, change, BETTER.get(signal, 0)))
        body.append(cells)
    caption = (
        "last values (smoothed when smoothing is on), % vs the baseline: green better, orange "
        "worse for that signal; entropy and length uncoloured (either way can be the failure)"
    )
    return html.Div(
        [
            html.P(caption, className="table-caption"),
            _markdown_table(["run", *signals], body, "delta-table"),
        ]
    )


def _delta_cell(value: float | None, change: float | None, better: int = 0) -> str:
    """``"0.5 (+25.0 %)"``; a change of 1 % or more marked up by what it means for the signal:
    bold when it goes the ``better`` way (+1 up, -1 down), italic the other way, plain for a
    signal with no better way (the style sheet colours bold green, italic orange).

    Left unescaped: digits, ``.``, ``e``, signs, brackets, ``%`` and ``—`` start no Markdown
    inline form, and escaped (six character references a cell) they nearly doubled the
    browser's time parsing a 50-run table.

    >>> _delta_cell(0.5, 25.0, +1), _delta_cell(0.5, 25.0, -1), _delta_cell(0.5, 25.0)
    ('**0.5 (+25.0 %)**', '*0.5 (+25.0 %)*', '0.5 (+25.0 %)')
    """
    shown = "—" if value is None else f"{value:.4g}"
    cell = shown if change is None else f"{shown} ({change:+.1f} %)"
    if change is None or abs(change) < 1 or not better:
        return cell
    return f"**{cell}**" if change * better > 0 else f"*{cell}*"


def config_table(runs: list[Any]) -> Any:
    """The config keys whose values differ between the runs (nested keys flattened)."""
    diff = compare_data.config_diff(runs)
    if not diff:
        return html.P("The configs do not differ.", className="empty")
    header = ["config key", *(r.name or r.id for r in runs)]
    body = [[markdown_text(key), *map(markdown_text, values)] for key, values in diff]
    return _markdown_table(header, body, "config-table")


def markdown_text(value: str) -> str:
    """``value`` as literal text in a Markdown table cell: every ASCII punctuation character as
    a numeric character reference, which the parser turns back into that character as text (so
    no emphasis, link, HTML, autolink or cell break forms), and line breaks as spaces.

    >>> markdown_text("<b>*a*</b> | x")
    '&#60;b&#62;&#42;a&#42;&#60;&#47;b&#62; &#124; x'
    """
    return _PUNCTUATION.sub(lambda m: f"&#{ord(m[0])};", " ".join(str(value).splitlines()))


_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")


def _markdown_table(header: list[str], body: list[list[str]], class_name: str) -> dcc.Markdown:
    """A table as one Markdown component: a few hundred cells as React elements of one Dash
    component, not a Dash component each (Dash's cost per component is what a 50-run page
    felt). Header cells are escaped here; body cells come escaped (and maybe marked up)."""
    lines = [
        "| " + " | ".join(markdown_text(h) for h in header) + " |",
        "|" + " --- |" * len(header),
        *("| " + " | ".join(cells) + " |" for cells in body),
    ]
    return dcc.Markdown("\n".join(lines), className=f"markdown-table {class_name}")

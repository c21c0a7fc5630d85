"""The compare page's tables and names: the delta table, the config diff, legend labels.

Built from what ``compare_data`` works out; plain Dash components, no callbacks.
"""

from __future__ import annotations

from typing import Any

from dash import html

from rlguard_frontend import compare_data


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


def delta_table(signals: list[str], rows: list[dict[str, Any]], labels: dict[str, str]) -> Any:
    """Last values and their % difference from the baseline run, as text cells."""
    if not signals:
        return []
    head = html.Tr([html.Th("run"), *(html.Th(s) for s in signals)])
    body = []
    for row in rows:
        name = labels.get(row["run"], row["run"])
        cells = [html.Td([name, " (baseline)" if row["baseline"] else ""], title=row["run"])]
        for signal in signals:
            value, change = row[signal]
            shown = "—" if value is None else f"{value:.4g}"
            delta = "" if change is None else f" ({change:+.1f} %)"
            cells.append(html.Td(shown + delta, className=_delta_class(change)))
        body.append(html.Tr(cells))
    caption = html.Caption("last values (smoothed when smoothing is on), % vs the baseline")
    return html.Table([caption, html.Thead(head), html.Tbody(body)], className="delta-table")


def _delta_class(change: float | None) -> str:
    if change is None or abs(change) < 1:
        return "delta"
    return "delta delta-up" if change > 0 else "delta delta-down"


def config_table(runs: list[Any]) -> Any:
    """The config keys whose values differ between the runs (nested keys flattened)."""
    diff = compare_data.config_diff(runs)
    if not diff:
        return html.P("The configs do not differ.", className="empty")
    head = html.Tr([html.Th("config key"), *(html.Th(r.name or r.id) for r in runs)])
    body = [html.Tr([html.Td(key), *(html.Td(v) for v in values)]) for key, values in diff]
    return html.Table([html.Thead(head), html.Tbody(body)], className="config-table")

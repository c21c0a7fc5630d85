"""What the compare page reads and works out: runs, their signals, deltas and config diffs.

No Dash here: the page's callbacks call these, and tests call them directly.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rlguard_backend.schemas import RunPublic, SeriesData, flatten_config
from rlguard_frontend import traces
from rlguard_frontend.api_client import ApiClient, carry_token
from rlguard_frontend.pages.compare.figures import RunMarks
from rlguard_frontend.panels import PANELS

MAX_RUNS = 50
READERS = 8  # runs whose markers are read at once
# max_points per panel across its runs (a downsampled line draws up to about half): 50 runs ×
# 120 (~60 points each, a vertex every ~12 px of a panel, every bucket's min and max kept),
# 12 runs × 500, 2 runs × 2,000
POINTS_BUDGET = 6000
MAX_POINTS = 2000
MIN_POINTS = 120
# The signals whose last values the delta table compares, in this order.
HEADLINE_SIGNALS: tuple[str, ...] = (
    "reward_mean",
    "entropy",
    "ppo_kl",
    "kl_loss",
    "clipfrac",
    "response_length",
    "grad_norm",
)
UNGROUPED_KEYS = ("seed", "random_seed", "data_seed")  # never worth grouping runs by
# signal -> axis unit, in registry order (the order of the panels on a run page)
SIGNAL_UNITS: dict[str, str] = {}
for _panel in PANELS:
    SIGNAL_UNITS.update({s: _panel.unit for s in _panel.signals})
    SIGNAL_UNITS.update({s: _panel.right_unit for s in _panel.right})


@dataclass(frozen=True)
class ComparedRun:
    run: RunPublic
    series: dict[str, SeriesData]  # canonical signal -> its first key's series
    marks: RunMarks | None = None  # read for the runs whose markers are drawn


def points_per_run(runs: int) -> int:
    """Fewer points each as runs are added, so 50 overlaid runs stay as light as two."""
    return max(MIN_POINTS, min(MAX_POINTS, POINTS_BUDGET // max(1, runs)))


def read_runs(
    client: ApiClient,
    run_ids: Sequence[str],
    smoothing: float,
    *,
    times: bool = False,
    span: Mapping[str, int] | None = None,
    signals: Sequence[str] = (),
    marked: Collection[str] = (),
    marked_alerts: bool = True,
) -> list[ComparedRun]:
    """Each run with its canonical signals' series (``signals`` only, when given), in one
    request, and for the ``marked`` runs their markers (and alerts, unless ``marked_alerts``
    is off), read a few runs at a time."""
    if not run_ids:
        return []
    wanted = [s for s in SIGNAL_UNITS if s in signals] if signals else list(SIGNAL_UNITS)
    wanted += [s for s in HEADLINE_SIGNALS if s not in wanted]
    answer = client.read_runs_series(
        run_ids,
        wanted,
        smoothing=smoothing,
        times=times,
        max_points=points_per_run(len(run_ids)),
        **dict(span or {}),
    )
    marks = read_marks(client, [r for r in run_ids if r in marked], marked_alerts)
    return [ComparedRun(r.run, r.series, marks.get(r.run.id)) for r in answer.data]


def read_marks(client: ApiClient, run_ids: Sequence[str], alerts: bool) -> dict[str, RunMarks]:
    """Each run's markers (and alerts, if asked), read a few runs at a time."""

    def read(run_id: str) -> RunMarks:
        markers = [m.model_dump() for m in client.run_markers(run_id).data]
        return RunMarks(markers, tuple(client.list_alerts(run_id).data) if alerts else ())

    if not run_ids:
        return {}
    with ThreadPoolExecutor(min(READERS, len(run_ids)), thread_name_prefix="rlguard-cmp") as pool:
        return dict(zip(run_ids, pool.map(carry_token(read), run_ids), strict=True))


def last_value(series: SeriesData | None, smoothed: bool) -> float | None:
    """The series' last finite value (of its smoothed line when there is one)."""
    if series is None:
        return None
    values = series.smoothed if smoothed and series.smoothed is not None else series.values
    decoded = (traces.decode([value])[0] for value in reversed(values))  # from the end: cheap
    return next((v for v in decoded if v is not None), None)


def percent_change(value: float | None, baseline: float | None) -> float | None:
    """``(value - baseline) / |baseline|`` in %; None when either is missing or baseline is 0.

    >>> percent_change(0.75, 0.5), percent_change(-1.5, -1.0), percent_change(1.0, 0.0)
    (50.0, -50.0, None)
    """
    if value is None or baseline is None or baseline == 0 or not math.isfinite(baseline):
        return None
    return (value - baseline) / abs(baseline) * 100


def deltas(
    runs: Sequence[ComparedRun], baseline: str, smoothed: bool
) -> tuple[list[str], list[dict[str, Any]]]:
    """The headline signals any run has, and per run each one's last value and % vs baseline."""
    signals = [s for s in HEADLINE_SIGNALS if any(s in r.series for r in runs)]
    base = next((r for r in runs if r.run.id == baseline), runs[0] if runs else None)
    references = {s: last_value(base.series.get(s), smoothed) if base else None for s in signals}
    rows = []
    for compared in runs:
        row: dict[str, Any] = {"run": compared.run.id, "baseline": compared is base}
        for signal in signals:
            value = last_value(compared.series.get(signal), smoothed)
            reference = references[signal]
            row[signal] = (value, None if compared is base else percent_change(value, reference))
        rows.append(row)
    return signals, rows


def config_diff(runs: Sequence[RunPublic]) -> list[tuple[str, list[str]]]:
    """The flattened config keys whose values differ between the runs, with each run's value.

    A key some runs lack differs; the value of a run without it reads ``—``.
    """
    flat = [flatten_config(run.config) for run in runs]
    keys = sorted({key for config in flat for key in config})
    out = []
    for key in keys:
        shown = [_text(config[key]) if key in config else "—" for config in flat]
        if len(set(shown)) > 1:
            out.append((key, shown))
    return out


def group_keys(runs: Sequence[RunPublic]) -> list[str]:
    """Config keys (flattened, as ``config.<key>``) that split the runs, seeds left out."""
    diff = config_diff(runs)
    return [f"config.{key}" for key, _ in diff if key.split(".")[-1] not in UNGROUPED_KEYS]


def _text(value: Any) -> str:
    return str(value) if not isinstance(value, float) else f"{value:.6g}"

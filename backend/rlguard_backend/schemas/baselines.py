"""A signal's level at the start of a run: one definition for the detectors and the dashboard.

The detectors judge entropy (and the other smoothed signals) against it, and their alerts
report it as ``entropy_start``; the run page draws the same value as its "start" guide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

START_POINTS = 5  # the start is the median of the first 5 finite points...
# ...or the first point alone when the second came this many steps later or more: sparse
# logging would mix the start with a state the run already left (one public trace lost 54 %
# of its entropy between its first two logged points).
START_SPARSE_GAP_STEPS = 10
# Steps from a key's first step that always hold its start (up to 5 points, gaps under 10).
START_SPAN_STEPS = START_POINTS * START_SPARSE_GAP_STEPS


def start_level(steps: Sequence[int], values: Sequence[float | None]) -> float | None:
    """The start of a series (steps ascending; None and non-finite values skipped), or None
    while it is not known yet (fewer than 5 finite points, logged densely).

    >>> start_level([0, 1, 2, 3, 4], [0.5, 0.9, 0.4, 0.6, 0.3]), start_level([0, 50], [0.5, 0.1])
    (0.5, 0.5)
    """
    head: list[tuple[int, float]] = []
    for step, value in zip(steps, values, strict=True):
        if value is not None and math.isfinite(value):
            head.append((step, value))
            if len(head) == START_POINTS:
                break
    if len(head) >= 2 and head[1][0] - head[0][0] >= START_SPARSE_GAP_STEPS:
        return head[0][1]
    if len(head) < START_POINTS:
        return None
    ordered = sorted(value for _, value in head)
    return ordered[START_POINTS // 2]

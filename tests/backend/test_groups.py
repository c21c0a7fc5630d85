"""Grouped bands: alignment of different step grids (pure) and GET /api/v1/groups (both DBs)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlguard_backend.api import groups
from rlguard_backend.core.errors import InvalidField
from rlguard_backend.store.groups import Points, aligned, band, bin_edges
from rlguard_backend.store.series import debiased_ema
from tests.conftest import RunningServer, new_run_id


def _points(steps: list[int], values: list[float]) -> Points:
    return Points(np.array(steps, dtype=np.int64), np.array(values, dtype=float))


@pytest.mark.parametrize(
    ("steps", "values", "bins", "expected"),
    [
        ([0, 1, 2, 3], [1, 3, 5, 7], 2, [2.0, 6.0]),  # a bin's mean of the points in it
        ([0, 3], [0, 6], 4, [0.0, 3.0, 5.0, 6.0]),  # no point in a bin: its centre interpolated
        ([0, 1], [4, 4], 2, [4.0, math.nan]),  # past the run's last step: nothing made up
        ([2, 3], [4, 4], 4, [math.nan, math.nan, 4.0, 4.0]),  # nor before its first
        ([], [], 2, [math.nan, math.nan]),
    ],
)
def test_groups_aligned_means_interpolates_inside_and_never_extrapolates(
    steps: list[int], values: list[float], bins: int, expected: list[float]
) -> None:
    got = aligned(_points(steps, values), bin_edges(0, 3, bins))
    assert np.allclose(got, expected, equal_nan=True)


def test_groups_band_is_over_the_runs_present_in_each_bin() -> None:
    edges = bin_edges(0, 3, 4)
    runs = [_points([0, 1, 2, 3], [1, 1, 1, 1]), _points([0, 1, 2, 3], [3, 3, 3, 3])]
    runs.append(_points([0, 1], [5, 5]))  # stopped early
    result = band(runs, edges)
    assert result.n == [3, 3, 2, 2]
    assert result.mean == [3.0, 3.0, 2.0, 2.0]
    assert result.min == [1.0, 1.0, 1.0, 1.0] and result.max == [5.0, 5.0, 3.0, 3.0]
    assert result.std[0] == 2.0 and result.std[2] == pytest.approx(math.sqrt(2), rel=1e-5)


def test_groups_points_smooth_before_dropping_non_finite() -> None:
    steps, values = np.array([0, 1, 2]), np.array([1.0, math.nan, 3.0])
    points = Points.of(steps, values, smoothing=0.5)
    assert points.steps.tolist() == [0, 2]
    assert points.values.tolist() == [1.0, pytest.approx((0.5 * 1 + 3) * 0.5 / 0.75)]


@pytest.mark.parametrize("weight", [0.01, 0.5, 0.9, 0.99])
def test_series_debiased_ema_closed_form_matches_the_step_by_step_recursion(weight: float) -> None:
    rng = np.random.default_rng(7)
    values: list[float | None] = [float(v) for v in rng.normal(3, 2, 5000)]
    values[10] = None
    values[11] = math.inf
    values.append(1e200)  # past what the closed form holds: the step-by-step path
    expected, accumulator, count = [], 0.0, 0
    for value in values:
        if value is None or not math.isfinite(value):
            expected.append(value)
            continue
        accumulator = accumulator * weight + (1 - weight) * value
        count += 1
        expected.append(accumulator / (1 - weight**count))
    got = debiased_ema(values, weight)
    assert got[10] is None and got[11] == math.inf
    finite = [i for i, v in enumerate(expected) if v is not None and math.isfinite(v)]
    assert [got[i] for i in finite] == pytest.approx([expected[i] for i in finite], rel=1e-9)


@pytest.fixture
def http(db_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=db_server.url, timeout=30) as client:
        yield client


def _seed(http: httpx.Client, project: str, lr: float, seed: int, every: int, last: int) -> str:
    run_id = new_run_id("grp")
    body = {"id": run_id, "project": project, "config": {"optim": {"lr": lr}, "seed": seed}}
    http.post("/api/v1/runs", json=body).raise_for_status()
    base = 1000 * lr
    steps = [
        {"step": s, "values": {"actor/entropy": base + seed, "critic/score/mean": seed}}
        for s in range(0, last + 1, every)
    ]
    batch = {"batch_id": "b", "steps": steps}
    http.post(f"/api/v1/runs/{run_id}/batches", json=batch).raise_for_status()
    return run_id


def test_groups_endpoint_one_band_per_config_value_with_the_right_mean(
    http: httpx.Client,
) -> None:
    project = new_run_id("groups")
    runs = [
        _seed(http, project, lr, seed, 1 + seed, 99) for lr in (1e-3, 3e-3) for seed in (0, 1, 2)
    ]
    params = {"runs": ",".join(runs), "by": "config.optim.lr", "signals": "entropy", "bins": 10}
    answer = http.get("/api/v1/groups", params=params)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [g["key"] for g in body["data"]] == [
        {"config.optim.lr": 1e-3},
        {"config.optim.lr": 3e-3},
    ]
    assert [g["runs"] for g in body["data"]] == [runs[:3], runs[3:]]
    for group, base in zip(body["data"], (1.0, 3.0), strict=True):
        entropy = group["signals"]["entropy"]
        assert len(entropy["steps"]) == 10 and set(entropy["n"]) == {3}
        assert entropy["mean"] == pytest.approx([base + 1] * 10)
        assert entropy["std"] == pytest.approx([1.0] * 10)
        assert entropy["min"] == pytest.approx([base] * 10)
        assert entropy["max"] == pytest.approx([base + 2] * 10)


def test_groups_endpoint_without_by_is_one_group_and_counts_early_stops(
    http: httpx.Client,
) -> None:
    project = new_run_id("groups")
    runs = [_seed(http, project, 1e-3, 0, 1, 99), _seed(http, project, 1e-3, 2, 1, 49)]
    params = {"runs": ",".join(runs), "signals": "entropy,reward_mean", "bins": 4}
    body = http.get("/api/v1/groups", params=params).json()
    (group,) = body["data"]
    assert group["key"] == {} and group["runs"] == runs
    assert group["signals"]["reward_mean"]["n"] == [2, 2, 1, 1]
    assert group["signals"]["reward_mean"]["mean"] == [1.0, 1.0, 0.0, 0.0]


MANY = ",".join(f"r{i}" for i in range(201))


@pytest.mark.parametrize(
    ("path", "params", "parameter"),
    [
        ("groups", {"runs": "", "signals": "entropy"}, "runs"),
        ("groups", {"runs": "a", "signals": "entropyy"}, "signals"),
        ("groups", {"runs": "a", "signals": "entropy", "by": "colour"}, "by"),
        ("groups", {"runs": "a", "signals": "entropy", "smoothing": "1"}, "smoothing"),
        ("series", {"runs": "", "signals": "entropy"}, "runs"),
        ("series", {"runs": "a", "signals": "colour"}, "signals"),
        ("series", {"runs": MANY, "signals": "entropy"}, "runs"),
        ("series", {"runs": "a,a," * 101, "signals": "entropy"}, "runs"),  # repeats count
        ("groups", {"runs": "a", "signals": "entropy," * 25}, "signals"),
        ("groups", {"runs": "a", "signals": "entropy", "by": "name,id,name,id,name"}, "by"),
        ("series", {"runs": "a", "signals": "entropy", "max_points": "2"}, "max_points"),
        ("series", {"runs": "a", "signals": "entropy", "smoothing": "1"}, "smoothing"),
    ],
)
def test_many_runs_endpoints_bad_parameters_are_422_naming_them(
    http: httpx.Client, path: str, params: dict[str, str], parameter: str
) -> None:
    """``/groups`` and ``/series`` (several runs' series at once) word a refusal alike."""
    answer = http.get(f"/api/v1/{path}", params=params)
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0]["loc"] == ["query", parameter]


def test_groups_endpoint_range_ending_before_its_start_has_no_bins(http: httpx.Client) -> None:
    run_id = _seed(http, new_run_id("groups"), 1e-3, 0, 1, 20)
    params = {"runs": run_id, "signals": "entropy", "from_step": 9, "to_step": 3}
    answer = http.get("/api/v1/groups", params=params)
    assert answer.status_code == 200, answer.text
    assert answer.json()["bins"] == 0
    assert answer.json()["data"][0]["signals"]["entropy"]["steps"] == []


@pytest.mark.parametrize(
    ("parameter", "value"),
    [
        ("runs", "a"),
        ("runs", ",,a,,b,"),
        ("runs", ","),
        ("runs", ""),
        ("runs", ",".join(["r"] * 200)),
        ("runs", ",".join(["r"] * 201)),
        ("signals", "entropy,,kl_coef,"),
        ("signals", "entropy, kl_coef"),
        ("signals", "entropyy"),
        ("signals", ",".join(["lr"] * 24)),
        ("signals", ",".join(["lr"] * 25)),
        ("by", ""),
        ("by", ",config.a b,,summary.x "),
        ("by", "config."),
        ("by", 'config.a"b'),
        ("by", " name"),
        ("by", "hparam.lr,last.entropy,alerts.open,created_at"),
        ("by", "hparam.lr,last.entropy,alerts.open,created_at,id"),
        ("by", "last.entropyy"),
        ("by", "config." + "k" * 256),
        ("by", "config." + "k" * 257),
    ],
)
def test_groups_declared_patterns_take_exactly_what_the_checks_take(
    parameter: str, value: str
) -> None:
    """The document's pattern for runs, signals and by (what a client or fuzzer reads) and the
    handlers' checks (which word the refusal) agree on every value."""
    pattern = {
        "runs": groups.RUNS_PATTERN,
        "signals": groups.SIGNALS_PATTERN,
        "by": groups.GROUP_BY_PATTERN,
    }[parameter]
    given = {"runs": "a", "signals": "entropy", "by": "", parameter: value}
    try:
        groups.runs_and_signals(given["runs"], given["signals"])
        groups.check_fields([f for f in given["by"].split(",") if f])
        taken = True
    except InvalidField:
        taken = False
    assert (re.search(pattern, value) is not None) == taken


DRAWS = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))


@DRAWS
@given(
    st.from_regex(groups.RUNS_PATTERN, fullmatch=True),
    st.from_regex(groups.SIGNALS_PATTERN, fullmatch=True),
    st.from_regex(groups.GROUP_BY_PATTERN, fullmatch=True),
)
def test_groups_every_value_the_patterns_take_is_taken(runs: str, signals: str, by: str) -> None:
    groups.runs_and_signals(runs, signals)
    groups.check_fields([f for f in by.split(",") if f])


def test_groups_endpoint_unknown_run_is_404(http: httpx.Client) -> None:
    answer = http.get("/api/v1/groups", params={"runs": "no-such-run", "signals": "entropy"})
    assert answer.status_code == 404 and "no-such-run" in answer.json()["detail"]

"""Groups: runs grouped by config values, each group drawn as a mean with its spread."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy import literal, select
from sqlalchemy.orm import Session

from rlguard.protocol import MAX_STEP
from rlguard_backend.api.deps import READ, DatabaseDep, IdentityDep, project_filter
from rlguard_backend.core.auth import Identity
from rlguard_backend.core.errors import InvalidField, run_not_found
from rlguard_backend.models import Run
from rlguard_backend.schemas import ERROR_RESPONSES, BandPublic, GroupList, GroupPublic
from rlguard_backend.store import repository, run_fields, sql, storage
from rlguard_backend.store.groups import Points, band, bin_edges

router = APIRouter(prefix="/v1/groups", tags=["runs"], responses=ERROR_RESPONSES)

MAX_RUNS = 200
MAX_GROUP_FIELDS = 4
MAX_SIGNALS = 24
Step = Annotated[int | None, Query(ge=0, le=MAX_STEP)]
_SIGNAL = "(" + "|".join(sorted(run_fields.SIGNAL_NAMES)) + ")"
# The pattern tells schema readers (and fuzzers) what is taken; the check below words a refusal.
SIGNALS_PATTERN = f"^{_SIGNAL}(,{_SIGNAL})*$"


# The query parameters of the endpoints that read several runs' signals at once.
RunIds = Annotated[
    str,
    Query(
        max_length=30_000,
        description="comma-separated run ids, at least one",
        json_schema_extra={"pattern": "[^,]"},  # checked in code, with a message naming the fix
    ),
]
Signals = Annotated[
    str,
    Query(
        max_length=2000,
        description="canonical signals: entropy,…",
        json_schema_extra={"pattern": SIGNALS_PATTERN},
    ),
]


@router.get("", response_model=GroupList, dependencies=[READ])
async def read_groups(
    db: DatabaseDep,
    identity: IdentityDep,
    runs: RunIds,
    signals: Signals,
    by: Annotated[str, Query(max_length=2000, description="run fields: config.lr,…")] = "",
    smoothing: Annotated[float, Query(ge=0, lt=1)] = 0.0,
    bins: Annotated[int, Query(ge=2, le=5000)] = 500,
    from_step: Step = None,
    to_step: Step = None,
) -> GroupList:
    """The runs grouped by the values of the ``by`` fields (none: one group), each group's mean,
    sample std, min and max per signal, on steps aligned across runs after smoothing.

    Alignment, for runs logged on different step grids: each run's points are smoothed at full
    resolution (the series endpoint's debiased EMA); the step range of all the runs is cut into
    ``bins`` equal bins; a run's value in a bin is the mean of its smoothed points there, or,
    where it has none, its smoothed line interpolated at the bin centre, only while that centre
    lies inside the run's own first..last step (never extrapolated); the statistics of a bin are
    over the runs with a value there, and ``n`` says how many. A run without the signal is
    counted in its group's ``runs`` and in no bin.
    """
    run_ids = list(dict.fromkeys(r for r in runs.split(",") if r))
    wanted = list(dict.fromkeys(s for s in signals.split(",") if s))
    fields = [f for f in by.split(",") if f]
    _check(run_ids, wanted, fields)
    if from_step is not None and to_step is not None and from_step > to_step:
        raise InvalidField(["query", "to_step"], "to_step must be at least from_step")

    def read(session: Session) -> GroupList:
        keys = _group_keys(session, run_ids, fields, identity)
        series = _read_points(session, run_ids, wanted, smoothing, from_step, to_step)
        steps = [
            p.steps for by_signal in series.values() for p in by_signal.values() if p.steps.size
        ]
        lo = from_step if from_step is not None else min((int(s[0]) for s in steps), default=0)
        hi = to_step if to_step is not None else max((int(s[-1]) for s in steps), default=lo)
        edges = bin_edges(lo, hi, bins)
        groups: dict[tuple[Any, ...], list[str]] = {}
        for run_id in run_ids:
            groups.setdefault(tuple(keys[run_id].values()), []).append(run_id)
        data = [
            GroupPublic(
                key=dict(zip(fields, value, strict=True)),
                runs=members,
                signals={
                    s: BandPublic(
                        **vars(band([series[r][s] for r in members if s in series[r]], edges))
                    )
                    for s in wanted
                },
            )
            for value, members in sorted(groups.items(), key=lambda item: _order(item[0]))
        ]
        return GroupList(
            by=fields, smoothing=smoothing, bins=len(edges) - 1, data=data, count=len(data)
        )

    return await db.read(read)


def _check(run_ids: list[str], wanted: list[str], fields: list[str]) -> None:
    check_runs_and_signals(run_ids, wanted)
    if len(fields) > MAX_GROUP_FIELDS:
        raise InvalidField(["query", "by"], f"at most {MAX_GROUP_FIELDS} by, got {len(fields)}")
    for field in fields:
        try:
            run_fields.check_field(field)
        except ValueError as exc:
            raise InvalidField(["query", "by"], str(exc)) from exc


def check_runs_and_signals(run_ids: list[str], wanted: list[str]) -> None:
    """422 naming the parameter: no run, too many runs or signals, an unknown signal."""
    for name, given, most in (("runs", run_ids, MAX_RUNS), ("signals", wanted, MAX_SIGNALS)):
        if len(given) > most:
            raise InvalidField(["query", name], f"at most {most} {name}, got {len(given)}")
    if not run_ids:
        raise InvalidField(["query", "runs"], "name at least one run: runs=a,b")
    unknown = [s for s in wanted if s not in run_fields.SIGNAL_NAMES]
    if not wanted or unknown:
        raise InvalidField(
            ["query", "signals"],
            f"unknown signals {unknown}; canonical signals: "
            + ", ".join(sorted(run_fields.SIGNAL_NAMES)),
        )


def _group_keys(
    session: Session, run_ids: list[str], fields: list[str], identity: Identity
) -> dict[str, dict[str, Any]]:
    """Each run's values of the grouping fields: 404 for an unknown run, 403 for a run of
    another project than a project-limited token's."""
    exprs = [run_fields.field_expr(f, sql.dialect(session)) for f in fields]
    columns = [c if c is not None else literal(None) for e in exprs for c in (e.number, e.text)]
    query = select(Run.id, Run.project, *columns).where(Run.id.in_(run_ids))
    found: dict[str, dict[str, Any]] = {}
    for run_id, project, *values in session.execute(query):
        project_filter(identity, project)
        pairs = zip(values[::2], values[1::2], exprs, strict=True)
        found[run_id] = {e.name: run_fields.shown(n, t, e) for n, t, e in pairs}
    missing = [r for r in run_ids if r not in found]
    if missing:
        raise run_not_found(missing[0])
    return found


def _read_points(
    session: Session,
    run_ids: list[str],
    wanted: list[str],
    smoothing: float,
    lo: int | None,
    hi: int | None,
) -> dict[str, dict[str, Points]]:
    """Per run and signal, the smoothed points of the run's first key (by name) of that signal."""
    out: dict[str, dict[str, Points]] = {r: {} for r in run_ids}
    for (run_id, signal), key in repository.first_keys(session, run_ids, wanted).items():
        steps, values = storage.STORE.read_arrays(
            session, key.id, lo or 0, MAX_STEP if hi is None else hi
        )
        out[run_id][signal] = Points.of(steps, values, smoothing)
    return out


def _order(value: tuple[Any, ...]) -> tuple[Any, ...]:
    """Groups by their values: missing last, numbers before text, numbers by size."""
    return tuple(
        (2, 0.0, "")
        if v is None
        else (0, float(v), "")
        if isinstance(v, int | float)
        else (1, 0.0, str(v))
        for v in value
    )

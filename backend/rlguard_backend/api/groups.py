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
from rlguard_backend.store import repository, run_field_grammar, run_fields, sql, storage
from rlguard_backend.store.groups import Points, band, bin_edges

router = APIRouter(prefix="/v1/groups", tags=["runs"], responses=ERROR_RESPONSES)

MAX_RUNS = 200
MAX_GROUP_FIELDS = 4
MAX_SIGNALS = 24
Step = Annotated[int | None, Query(ge=0, le=MAX_STEP)]
_SIGNAL = "(" + "|".join(sorted(run_fields.SIGNAL_NAMES)) + ")"


def _listing(item: str, most: int) -> str:
    """1..``most`` comma-separated items, empty parts allowed, as the handlers split them."""
    return f"^,*{item}(,+{item}){{0,{most - 1}}},*$"


# The patterns state every rule the handlers check before reading (items counted as written,
# repeats too), so a client (or a fuzzer) knows exactly what is taken; the checks word a refusal.
RUNS_PATTERN = _listing("[^,]+", MAX_RUNS)
SIGNALS_PATTERN = _listing(_SIGNAL, MAX_SIGNALS)
GROUP_BY_PATTERN = run_field_grammar.group_by(MAX_GROUP_FIELDS)


# Lengths in characters such that the three together fit the default request head limit
# (RLGUARD_MAX_REQUEST_HEAD_BYTES, 64 KiB; beyond it 431) however they are percent-encoded: a
# character takes at most 12 bytes (4 UTF-8 bytes as %XX each), 12 × 5,200 = 62,400.
MAX_RUNS_CHARS = 3500  # 200 run ids of 16 characters, 140 of the hook's 24 (with commas)
MAX_SIGNALS_CHARS = 600  # 24 signals of 24 characters
MAX_GROUP_BY_CHARS = 1100  # 4 summary.<key> fields of the longest key


def _listing_query(max_length: int, description: str, pattern: str) -> Any:
    return Query(
        max_length=max_length, description=description, json_schema_extra={"pattern": pattern}
    )


# The query parameters of the endpoints that read several runs' signals at once.
RunIds = Annotated[
    str,
    _listing_query(
        MAX_RUNS_CHARS,
        f"comma-separated run ids, 1 to {MAX_RUNS} (the request line must fit the request "
        "head limit)",
        RUNS_PATTERN,
    ),
]
Signals = Annotated[
    str,
    _listing_query(
        MAX_SIGNALS_CHARS, f"canonical signals, 1 to {MAX_SIGNALS}: entropy,…", SIGNALS_PATTERN
    ),
]
GroupBy = Annotated[
    str,
    _listing_query(
        MAX_GROUP_BY_CHARS, f"run fields, at most {MAX_GROUP_FIELDS}: config.lr,…", GROUP_BY_PATTERN
    ),
]


@router.get("", response_model=GroupList, dependencies=[READ])
async def read_groups(
    db: DatabaseDep,
    identity: IdentityDep,
    runs: RunIds,
    signals: Signals,
    by: GroupBy = "",
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
    counted in its group's ``runs`` and in no bin. A ``to_step`` before ``from_step`` is an
    empty range: no bins.
    """
    run_ids, wanted = runs_and_signals(runs, signals)
    fields = [f for f in by.split(",") if f]
    check_fields(fields)

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


def check_fields(fields: list[str]) -> None:
    """422 naming ``by`` for too many fields or one that is not a run field."""
    if len(fields) > MAX_GROUP_FIELDS:
        raise InvalidField(["query", "by"], f"at most {MAX_GROUP_FIELDS} by, got {len(fields)}")
    for field in fields:
        try:
            run_fields.check_field(field)
        except ValueError as exc:
            raise InvalidField(["query", "by"], str(exc)) from exc


def runs_and_signals(runs: str, signals: str) -> tuple[list[str], list[str]]:
    """The run ids and signals asked for, each once in the order given; 422 naming the
    parameter for no run, too many runs or signals (counted as written), an unknown signal."""
    run_ids = [r for r in runs.split(",") if r]
    wanted = [s for s in signals.split(",") if s]
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
    return list(dict.fromkeys(run_ids)), list(dict.fromkeys(wanted))


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

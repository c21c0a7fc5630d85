"""Storage verbs for runs and metric keys, taking a Session. No commits, no HTTP."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import delete, func, literal, select, update
from sqlalchemy.orm import Session

from rlguard.protocol import MAX_STEP
from rlguard_backend.core.errors import Conflict, NotFound, run_not_found
from rlguard_backend.models import (
    Alert,
    MetricKey,
    PointChunk,
    Rollup,
    Run,
    RunEvent,
    RunTag,
    as_utc,
    utcnow,
)
from rlguard_backend.schemas import (
    ClientDrops,
    Dropped,
    MetricKeyPublic,
    RunCreate,
    RunFieldPublic,
    RunPublic,
    RunRow,
    RunUpdate,
    flatten_config,
)
from rlguard_backend.signals import canonical_signal
from rlguard_backend.store import points, run_fields, sql, storage
from rlguard_backend.store.rollups import BUCKET_WIDTHS

MAX_DROP_REPORTERS = 64  # trainer processes whose drop reports a run keeps apart
EARLIER_REPORTERS = "earlier"
FIELD_SCAN_RUNS = 2000  # runs whose config and summary keys the field list is made from
MAX_LISTED_KEYS = 500
MAX_LISTED_NAMESAKES = 10  # runs a 409 for an ambiguous run name lists


def get_run(session: Session, run_id: str) -> Run:
    """The run, or 404 naming how to create it."""
    run = session.get(Run, run_id)
    if run is None:
        raise run_not_found(run_id)
    return run


def find_run(session: Session, ref: str, project: str | None = None) -> Run:
    """The run a read names by its id, else by its name (of ``project`` when given).

    404 when no run has that id or name; 409 listing the runs when several share the name.
    """
    run = session.get(Run, ref)
    if run is not None and (project is None or run.project == project):
        return run
    query = select(Run).where(Run.name == ref)
    if project is not None:
        query = query.where(Run.project == project)
    query = query.order_by(Run.created_at.desc(), Run.id).limit(MAX_LISTED_NAMESAKES + 1)
    namesakes = list(session.scalars(query))
    if len(namesakes) == 1:
        return namesakes[0]
    where = f" in project {project!r}" if project is not None else ""
    if not namesakes:
        raise NotFound(
            f"no run has the id or name {ref!r}{where}; GET /api/v1/runs lists the runs "
            "(the dashboard's runs page too)"
        )
    raise _ambiguous_name(session, ref, project, namesakes)


def _ambiguous_name(
    session: Session, name: str, project: str | None, namesakes: list[Run]
) -> Conflict:
    """409 listing the runs that share ``name``: id, project and start, newest first."""
    query = select(func.count()).select_from(Run).where(Run.name == name)
    if project is not None:
        query = query.where(Run.project == project)
    count = session.scalar(query) or 0
    listed = "; ".join(
        f"{r.id} (project {r.project!r}, started {as_utc(r.created_at):%Y-%m-%d %H:%M} UTC)"
        for r in namesakes[:MAX_LISTED_NAMESAKES]
    )
    more = f"; and {count - MAX_LISTED_NAMESAKES} more" if count > MAX_LISTED_NAMESAKES else ""
    return Conflict(
        f"{count} runs are named {name!r}: {listed}{more}. Name one by its id, or add its "
        "project: ?project=<project> in the API, <project>/<name> in the CLI, Api and dashboard"
    )


def run_project(session: Session, run_id: str) -> str | None:
    """The project of a run, None when there is no such run."""
    return session.scalar(select(Run.project).where(Run.id == run_id))


def alert_project(session: Session, alert_id: int) -> str | None:
    """The project of an alert's run, None when there is no such alert."""
    query = select(Run.project).join(Alert, Alert.run_id == Run.id).where(Alert.id == alert_id)
    return session.scalar(query)


def run_tags(session: Session, run_ids: Sequence[str]) -> dict[str, list[str]]:
    """Each run's tags, sorted, in one query."""
    tags: dict[str, list[str]] = {run_id: [] for run_id in run_ids}
    if run_ids:
        query = select(RunTag.run_id, RunTag.tag).where(RunTag.run_id.in_(run_ids))
        for run_id, tag in session.execute(query.order_by(RunTag.tag)):
            tags[run_id].append(tag)
    return tags


def to_public(run: Run, tags: list[str]) -> RunPublic:
    """A run row with its tags as the API answers it (times in UTC)."""
    return RunPublic(
        id=run.id,
        project=run.project,
        name=run.name,
        status=run.status,  # type: ignore[arg-type]
        config=run.config or {},
        summary=run.summary or {},
        tags=tags,
        last_step=run.last_step,
        resume_from_step=run.resume_from_step,
        created_at=as_utc(run.created_at),
        updated_at=as_utc(run.updated_at),
        last_heartbeat_at=as_utc(run.last_heartbeat_at) if run.last_heartbeat_at else None,
        archived_at=as_utc(run.archived_at) if run.archived_at else None,
        dropped=dropped_total(run),
    )


def dropped_total(run: Run) -> Dropped:
    """The drops every trainer process of the run reported, added up (saturating at the wire's
    bound: each process may report up to it, so their sum may pass it)."""
    reports = (run.client_drops or {}).values()
    return Dropped(
        **{f: min(sum(r.get(f, 0) for r in reports), MAX_STEP) for f in Dropped.model_fields}
    )


def to_row(run: Run, tags: list[str], values: dict[str, Any]) -> RunRow:
    """A run as a row of the runs grid: its public fields, tags and the asked-for values."""
    return RunRow(**dict(to_public(run, tags)), values=values)


ENDED = ("finished", "stopped", "failed")  # a crashed run may beat again: its alerts stay open


def create_or_resume_run(session: Session, data: RunCreate) -> tuple[Run, bool]:
    """Create the run, or resume it when the id exists in the same project. True if created."""
    run = session.get(Run, data.id)
    now = utcnow()
    if run is not None:
        if run.project != data.project:
            raise Conflict(
                f"run {data.id!r} already exists in project {run.project!r}, not {data.project!r};"
                " resume it with its own project or choose another run id"
            )
        if run.status in ENDED:
            reopen_alerts(session, run.id)
        run.status, run.updated_at, run.last_heartbeat_at = "running", now, now
        session.add(RunEvent(run_id=run.id, kind="restart", step=run.last_step, created_at=now))
        run.archived_at = None  # a run trained again is in use again
        run.name = data.name or run.name
        run.config = {**(run.config or {}), **data.config}
        _add_tags(session, run.id, data.tags)
        if data.resume_from_step is not None:
            rewind_run(session, run, data.resume_from_step)
        return run, False
    run = Run(
        id=data.id,
        project=data.project,
        name=data.name,
        status="running",
        config=data.config,
        summary={},
        created_at=now,
        updated_at=now,
        last_heartbeat_at=now,
    )
    session.add(run)
    session.flush()
    _add_tags(session, run.id, data.tags)
    return run, True


def _add_tags(session: Session, run_id: str, tags: Iterable[str]) -> None:
    existing = set(session.scalars(select(RunTag.tag).where(RunTag.run_id == run_id)))
    session.add_all(RunTag(run_id=run_id, tag=t) for t in dict.fromkeys(tags) if t not in existing)
    session.flush()


def list_runs(
    session: Session,
    *,
    project: str | None = None,
    status: str | None = None,
    tag: str | None = None,
    archived: bool = False,
    limit: int = 50,
    offset: int = 0,
    sort: Sequence[run_fields.SortKey] = (),
    filters: Sequence[run_fields.Filter] = (),
    fields: Sequence[str] = (),
) -> tuple[list[tuple[Run, dict[str, Any]]], int]:
    """A page of runs, each with the ``fields`` asked for, and how many runs match in all.

    Archived runs only when ``archived``. ``sort`` and ``filters`` name fields of
    ``run_fields``; newest first after them. ValueError names a filter that does not fit.
    """
    dialect = sql.dialect(session)
    query = select(Run).where(
        Run.archived_at.is_not(None) if archived else Run.archived_at.is_(None)
    )
    if project is not None:
        query = query.where(Run.project == project)
    if status is not None:
        query = query.where(Run.status == status)
    if tag is not None:
        query = query.where(Run.id.in_(select(RunTag.run_id).where(RunTag.tag == tag)))
    for rule in filters:
        query = query.where(run_fields.where(run_fields.field_expr(rule.field, dialect), rule))
    count = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    ordering = [
        term
        for key in sort
        for term in run_fields.order_by(run_fields.field_expr(key.field, dialect), key.descending)
    ]
    shown = [run_fields.field_expr(name, dialect) for name in fields]
    columns = [e if e is not None else literal(None) for f in shown for e in (f.number, f.text)]
    page = (
        query.add_columns(*columns)
        .order_by(*ordering, Run.created_at.desc(), Run.id)
        .limit(limit)
        .offset(offset)
    )
    rows = []
    for run, *values in session.execute(page):
        pairs = zip(values[::2], values[1::2], shown, strict=True)
        rows.append((run, {f.name: run_fields.shown(n, t, f) for n, t, f in pairs}))
    return rows, count


def list_run_fields(
    session: Session, project: str | None = None, max_runs: int = FIELD_SCAN_RUNS
) -> list[RunFieldPublic]:
    """The fields the newest ``max_runs`` runs (of a project) can be listed by, most common first.

    Config and summary keys are flattened (nested dicts as dotted paths); ``last.<signal>`` for
    every canonical signal some run logs.
    """
    query = select(Run.id, Run.config, Run.summary).order_by(Run.created_at.desc()).limit(max_runs)
    if project is not None:
        query = query.where(Run.project == project)
    found = session.execute(query).all()
    counts: dict[tuple[str, str], int] = {}
    for _, config, summary in found:
        for prefix, values in (("config", config), ("summary", summary)):
            for name, value in flatten_config(values or {}).items():
                field = (f"{prefix}.{name}", field_kind(value))
                counts[field] = counts.get(field, 0) + 1
    signals = (
        select(MetricKey.signal, func.count(func.distinct(MetricKey.run_id)))
        .where(MetricKey.signal.is_not(None), MetricKey.run_id.in_([r[0] for r in found]))
        .group_by(MetricKey.signal)
    )
    total = len(found)
    fixed = [(n, "text") for n in run_fields.TEXT_COLUMNS] + [("last_step", "number")]
    fixed += [(n, "date") for n in run_fields.DATE_COLUMNS] + [("health", "text")]
    fixed += [(f"alerts.{s}", "number") for s in ("open", *run_fields.SEVERITIES)]
    fields = [RunFieldPublic(name=n, kind=k, runs=total) for n, k in fixed]  # type: ignore[arg-type]
    fields += [
        RunFieldPublic(name=f"hparam.{h}", kind="json", runs=total) for h in run_fields.HPARAMS
    ]
    fields += [
        RunFieldPublic(name=f"last.{signal}", kind="number", runs=runs)
        for signal, runs in session.execute(signals)
        if signal in run_fields.SIGNAL_NAMES
    ]
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0][0]))
    fields += [
        RunFieldPublic(name=name, kind=kind, runs=runs)  # type: ignore[arg-type]
        for (name, kind), runs in ordered[:MAX_LISTED_KEYS]
    ]
    return fields


def field_kind(value: Any) -> str:
    """``"number"`` for a JSON number, ``"json"`` for anything else."""
    return "number" if isinstance(value, int | float) and not isinstance(value, bool) else "json"


def set_archived(session: Session, run_ids: Sequence[str], archived: bool) -> None:
    """Archive the runs (kept whole, left out of the lists), or bring them back."""
    when = utcnow() if archived else None
    for run in session.scalars(select(Run).where(Run.id.in_(run_ids))):
        if archived != (run.archived_at is not None):
            run.archived_at, run.updated_at = when, utcnow()


def update_run(session: Session, run: Run, data: RunUpdate) -> Run:
    """Apply a run update (status, name, merged summary); the caller commits. A run that ends
    closes its open alerts: resolved, ``closed_with_run``, kept in its history."""
    if data.status is not None:
        if data.status in ENDED and run.status not in ENDED:
            close_alerts(session, run.id)
        run.status = data.status
    if data.name is not None:
        run.name = data.name
    if data.summary is not None:
        run.summary = {**(run.summary or {}), **data.summary}
    run.updated_at = utcnow()
    return run


def close_alerts(session: Session, run_id: str) -> int:
    """Resolve the run's open alerts as closed with the run; how many there were."""
    result = session.execute(
        update(Alert)
        .where(Alert.run_id == run_id, Alert.status == "open")
        .values(status="resolved", closed_with_run=True, updated_at=utcnow())
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def reopen_alerts(session: Session, run_id: str) -> None:
    """A resumed run's alerts closed with it are open again: the detectors, which resume from
    their checkpoint, still hold them open and resolve them when their condition clears."""
    session.execute(
        update(Alert)
        .where(Alert.run_id == run_id, Alert.closed_with_run.is_(True))
        .values(status="open", closed_with_run=False, updated_at=utcnow())
    )


def heartbeat(session: Session, run: Run, drops: ClientDrops | None = None) -> Run:
    """Record a heartbeat (and what the process reports dropping); a crashed run that beats
    again is running again."""
    run.last_heartbeat_at = run.updated_at = utcnow()
    if run.status == "crashed":
        run.status = "running"
    if drops is not None:
        run.client_drops = merge_drops(run.client_drops or {}, drops)
    return run


def merge_drops(reports: dict[str, Any], drops: ClientDrops) -> dict[str, Any]:
    """``reports`` with one process's counts. Each count only grows, so a report sent twice or
    late changes nothing; past MAX_DROP_REPORTERS processes the oldest is added to "earlier"."""
    counts = drops.model_dump(exclude={"process"})
    before = reports.get(drops.process, {})
    merged = {p: r for p, r in reports.items() if p != drops.process}
    merged[drops.process] = {f: max(n, before.get(f, 0)) for f, n in counts.items()}  # newest last
    reporters = [p for p in merged if p != EARLIER_REPORTERS]
    if len(reporters) > MAX_DROP_REPORTERS:
        oldest, earlier = merged.pop(reporters[0]), merged.get(EARLIER_REPORTERS, {})
        merged[EARLIER_REPORTERS] = {f: earlier.get(f, 0) + oldest.get(f, 0) for f in counts}
    return merged


def rewind_run(session: Session, run: Run, step: int) -> Run:
    """Supersede every point and sample after ``step``: a restarted trainer rewrites them."""
    keys = list(session.scalars(select(MetricKey).where(MetricKey.run_id == run.id)))
    storage.STORE.delete_after(session, [k.id for k in keys], step)
    sql.execute(session, "DELETE FROM samples WHERE run_id = ? AND step > ?", (run.id, step))
    for key in keys:
        if key.last_step is not None and key.last_step > step:
            tail = storage.STORE.key_tail(session, key.id)
            key.last_step, key.tail_step, key.tail_count = (
                tail.last_step,
                tail.tail_step,
                tail.tail_count,
            )
    run.resume_from_step = step
    session.add(RunEvent(run_id=run.id, kind="rewind", step=step, created_at=utcnow()))
    if run.last_step is not None and run.last_step > step:
        run.last_step = max((k.last_step for k in keys if k.last_step is not None), default=None)
    run.updated_at = utcnow()
    return run


def ensure_key_ids(
    session: Session, run_id: str, names: Iterable[str], aliases: dict[str, str] | None
) -> dict[str, tuple[int, points.KeyTail]]:
    """``{name: (key id, its tail)}`` for the run, creating missing keys (concurrency-safe)."""
    wanted = set(names)
    found = _key_ids(session, run_id)
    missing = wanted - found.keys()
    if missing:
        rows = [(run_id, name, canonical_signal(name, aliases)) for name in sorted(missing)]
        sql.executemany(
            session,
            "INSERT INTO metric_keys (run_id, name, signal, tail_count) VALUES (?, ?, ?, 0) "
            "ON CONFLICT (run_id, name) DO NOTHING",
            rows,
        )
        found = _key_ids(session, run_id)
    return {name: found[name] for name in wanted}


def _key_ids(session: Session, run_id: str) -> dict[str, tuple[int, points.KeyTail]]:
    rows = sql.fetchall(
        session,
        "SELECT name, id, last_step, tail_step, tail_count FROM metric_keys WHERE run_id = ?",
        (run_id,),
    )
    return {
        name: (key_id, points.KeyTail(last_step, tail_step, tail_count))
        for name, key_id, last_step, tail_step, tail_count in rows
    }


def run_keys(session: Session, run_id: str) -> list[MetricKey]:
    """The run's metric keys by name."""
    query = select(MetricKey).where(MetricKey.run_id == run_id).order_by(MetricKey.name)
    return list(session.scalars(query))


def first_keys(
    session: Session, run_ids: Sequence[str], signals: Sequence[str]
) -> dict[tuple[str, str], MetricKey]:
    """Per (run, canonical signal), the run's first key (by name) that maps to the signal."""
    query = (
        select(MetricKey)
        .where(MetricKey.run_id.in_(run_ids), MetricKey.signal.in_(signals))
        .order_by(MetricKey.run_id, MetricKey.signal, MetricKey.name)
    )
    chosen: dict[tuple[str, str], MetricKey] = {}
    for key in session.scalars(query):
        chosen.setdefault((key.run_id, str(key.signal)), key)
    return chosen


def describe_keys(session: Session, run_id: str) -> list[MetricKeyPublic]:
    """Keys with point counts and step ranges, read from the coarsest rollups."""
    top = len(BUCKET_WIDTHS) - 1
    stats = {
        key_id: (count, first)
        for key_id, count, first in sql.fetchall(
            session,
            "SELECT r.key_id, sum(r.count), min(r.first_step) FROM rollups r "
            "JOIN metric_keys k ON k.id = r.key_id WHERE k.run_id = ? AND r.level = ? "
            "GROUP BY r.key_id",
            (run_id, top),
        )
    }
    return [
        MetricKeyPublic(
            name=key.name,
            signal=key.signal,
            count=int(stats.get(key.id, (0, None))[0] or 0),
            first_step=stats.get(key.id, (0, None))[1],
            last_step=key.last_step,
        )
        for key in run_keys(session, run_id)
    ]


def delete_runs(session: Session, run_ids: Sequence[str]) -> int:
    """Delete runs with everything they own: points, rollups, keys, alerts, state, samples.

    Chunks and rollups carry no foreign key (one check per row would cost ingest), so they go
    first by key id; the rest follows the runs through ON DELETE CASCADE.
    """
    if not run_ids:
        return 0
    key_ids = select(MetricKey.id).where(MetricKey.run_id.in_(run_ids)).scalar_subquery()
    session.execute(delete(PointChunk).where(PointChunk.key_id.in_(key_ids)))
    session.execute(delete(Rollup).where(Rollup.key_id.in_(key_ids)))
    result = session.execute(delete(Run).where(Run.id.in_(run_ids)))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]

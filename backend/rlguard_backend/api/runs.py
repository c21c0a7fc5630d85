"""Runs: create-or-resume, list, read, update, heartbeat, rewind."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rlguard_backend import ingest
from rlguard_backend.api.bodies import documented_body
from rlguard_backend.api.deps import (
    ADMIN,
    READ,
    WRITE,
    DatabaseDep,
    IdentityDep,
    Limit,
    Offset,
    RunRefDep,
    SettingsDep,
    WriterDep,
    project_filter,
)
from rlguard_backend.core.config import Settings
from rlguard_backend.core.errors import Conflict, InvalidField, NotFound, PayloadTooLarge
from rlguard_backend.detection import feed
from rlguard_backend.models import Run
from rlguard_backend.schemas import (
    ERROR_RESPONSES,
    DetectRequest,
    DetectResult,
    ErrorBody,
    Heartbeat,
    HeartbeatIn,
    MarkerList,
    ProjectList,
    ProjectPublic,
    RunCreate,
    RunFieldList,
    RunList,
    RunPublic,
    RunRewind,
    RunsArchived,
    RunsDeleted,
    RunStatus,
    RunUpdate,
)
from rlguard_backend.store import markers, repository, run_field_grammar, run_fields

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=ERROR_RESPONSES)
projects = APIRouter(prefix="/v1/projects", tags=["runs"], responses=ERROR_RESPONSES)
fields_router = APIRouter(prefix="/v1/run-fields", tags=["runs"], responses=ERROR_RESPONSES)


def _public(session: Session, run_id: str) -> RunPublic:
    run = repository.get_run(session, run_id)
    return repository.to_public(run, repository.run_tags(session, [run.id])[run.id])


@router.post(
    "",
    response_model=RunPublic,
    status_code=status.HTTP_201_CREATED,
    dependencies=[WRITE],
    responses={200: {"model": RunPublic, "description": "resumed: the run existed"}},
)
async def create_run(
    data: RunCreate,
    db: WriterDep,
    settings: SettingsDep,
    identity: IdentityDep,
    response: Response,
) -> RunPublic:
    """Create a run with a client-chosen id, or resume it (200) when it exists."""
    project_filter(identity, data.project)
    _check_config(data.config, settings)

    replayed = None
    if data.resume_from_step is not None:  # the replay of a rewind reads outside the lock
        replayed = await db.read(lambda session: _replay_if_stored(session, data, settings))

    def create_or_resume(session: Session) -> tuple[RunPublic, bool]:
        run, created = repository.create_or_resume_run(session, data)
        if data.resume_from_step is not None and not created:
            if replayed is None:  # created by another request meanwhile: a few steps at most
                feed.backtest(session, run, settings, {}, apply=True)
            else:
                feed.apply_replay(session, run, replayed)
        session.commit()
        return _public(session, run.id), created

    run, created = await db.write(create_or_resume)
    if not created:
        response.status_code = status.HTTP_200_OK
    return run


def _replay_if_stored(session: Session, data: RunCreate, settings: Settings) -> feed.Replay | None:
    """A resumed run's replay up to its ``resume_from_step``, with the config the resume leaves
    it (``create_or_resume_run`` merges the new keys in); None for a run not stored yet."""
    run = session.get(Run, data.id)
    if data.resume_from_step is None or run is None:
        return None
    config = {**(run.config or {}), **data.config}
    return feed.replay_run(session, run, settings, {}, last=data.resume_from_step, config=config)


def _check_config(config: dict[str, Any], settings: Settings) -> None:
    try:
        feed.check_run_config(config, settings)
    except ValueError as exc:
        raise InvalidField(["body", "config"], f"run config: {exc}") from exc


@router.delete("/{run_id}", response_model=RunsDeleted, dependencies=[ADMIN])
async def delete_run(run_id: str, db: WriterDep) -> RunsDeleted:
    """Delete a run and everything stored for it (points, alerts, detector state, samples)."""

    def remove(session: Session) -> RunsDeleted:
        repository.get_run(session, run_id)
        deleted = repository.delete_runs(session, [run_id])
        session.commit()
        return RunsDeleted(deleted=deleted, run_ids=[run_id])

    return await db.write(remove)


@projects.get("", response_model=ProjectList, dependencies=[READ])
async def list_projects(db: DatabaseDep, identity: IdentityDep) -> ProjectList:
    """Every project (a token's own when limited to one) with its unarchived runs, by name."""
    only = project_filter(identity, None)

    def read(session: Session) -> ProjectList:
        query = select(Run.project, func.count()).where(Run.archived_at.is_(None))
        if only is not None:
            query = query.where(Run.project == only)
        query = query.group_by(Run.project).order_by(Run.project)
        found = [ProjectPublic(name=n, runs=c) for n, c in session.execute(query)]
        return ProjectList(data=found, count=len(found))

    return await db.read(read)


@projects.delete("/{project}", response_model=RunsDeleted, dependencies=[ADMIN])
async def delete_project(project: str, db: WriterDep) -> RunsDeleted:
    """Delete every run of a project with everything stored for them."""

    def remove(session: Session) -> RunsDeleted:
        run_ids = _project_runs(session, project)
        deleted = repository.delete_runs(session, run_ids)
        session.commit()
        return RunsDeleted(deleted=deleted, run_ids=run_ids)

    return await db.write(remove)


@router.post("/{run_id}/archive", response_model=RunPublic, dependencies=[ADMIN])
async def archive_run(run_id: str, db: WriterDep) -> RunPublic:
    """Archive a run: kept whole, left out of the run and alert lists until brought back
    (DELETE this path) or trained again."""
    return await db.write(lambda session: _archive(session, [run_id], True, run_id))


@router.delete("/{run_id}/archive", response_model=RunPublic, dependencies=[ADMIN])
async def unarchive_run(run_id: str, db: WriterDep) -> RunPublic:
    """Bring an archived run back into the lists."""
    return await db.write(lambda session: _archive(session, [run_id], False, run_id))


def _archive(session: Session, run_ids: list[str], archived: bool, run_id: str) -> RunPublic:
    repository.get_run(session, run_id)
    repository.set_archived(session, run_ids, archived)
    session.commit()
    return _public(session, run_id)


def _project_runs(session: Session, project: str) -> list[str]:
    run_ids = sorted(session.scalars(select(Run.id).where(Run.project == project)))
    if not run_ids:
        raise NotFound(f"project {project!r} has no runs; GET /api/v1/runs lists them")
    return run_ids


@projects.post("/{project}/archive", response_model=RunsArchived, dependencies=[ADMIN])
async def archive_project(project: str, db: WriterDep) -> RunsArchived:
    """Archive every run of a project."""
    return await db.write(lambda session: _archive_project(session, project, True))


@projects.delete("/{project}/archive", response_model=RunsArchived, dependencies=[ADMIN])
async def unarchive_project(project: str, db: WriterDep) -> RunsArchived:
    """Bring every run of a project back into the lists."""
    return await db.write(lambda session: _archive_project(session, project, False))


def _archive_project(session: Session, project: str, archived: bool) -> RunsArchived:
    run_ids = _project_runs(session, project)
    repository.set_archived(session, run_ids, archived)
    session.commit()
    return RunsArchived(archived=archived, run_ids=run_ids)


MAX_FILTERS = 16
SortParam = Annotated[
    str | None,
    Query(
        max_length=2000,
        description="comma-separated fields, '-' for descending: -last.reward_mean,name",
        json_schema_extra={"pattern": run_field_grammar.SORT},
    ),
]
FilterParam = Annotated[
    list[str],
    Query(
        alias="filter",
        description="repeatable <field>:<op>[:<value>], op one of "
        f"{', '.join(run_fields.FILTER_OPS)}: config.lr:gt:0.0001",
        json_schema_extra={
            "maxItems": MAX_FILTERS,
            "items": {"type": "string", "pattern": run_field_grammar.FILTER},
        },
    ),
]
FieldsParam = Annotated[
    str | None,
    Query(
        max_length=4000,
        description="computed fields each run carries in values",
        json_schema_extra={"pattern": run_field_grammar.FIELDS},
    ),
]


@router.get("", response_model=RunList, dependencies=[READ])
async def list_runs(
    db: DatabaseDep,
    identity: IdentityDep,
    project: str | None = None,
    status: RunStatus | None = None,
    tag: str | None = None,
    archived: Annotated[bool, Query(description="true: the archived runs instead")] = False,
    limit: Limit = 50,
    offset: Offset = 0,
    sort: SortParam = None,
    filters: FilterParam = [],  # noqa: B006 (FastAPI copies defaults)
    fields: FieldsParam = None,
) -> RunList:
    """Runs, newest first or by ``sort``, narrowed by ``filter``s; ``count`` is the total match.
    Archived runs only on request.

    Fields are those of ``rlguard_backend.store.run_fields``: the run's columns, ``config.<key>``,
    ``summary.<key>``, ``hparam.<name>``, ``last.<signal>``, ``alerts.<severity>``, ``health``.
    """
    project = project_filter(identity, project)
    order, rules, shown = _parse_list_params(sort, filters, fields)

    def read(session: Session) -> RunList:
        try:
            runs, count = repository.list_runs(
                session,
                project=project,
                status=status,
                tag=tag,
                archived=archived,
                limit=limit,
                offset=offset,
                sort=order,
                filters=rules,
                fields=shown,
            )
        except ValueError as exc:
            raise InvalidField(["query", "filter"], str(exc)) from exc
        _check_grammar(sort, filters, fields)  # after the field checks, whose refusals say more
        tags = repository.run_tags(session, [r.id for r, _ in runs])
        return RunList(data=[repository.to_row(r, tags[r.id], v) for r, v in runs], count=count)

    return await db.read(read)


def _parse_list_params(
    sort: str | None, filters: list[str], fields: str | None
) -> tuple[tuple[run_fields.SortKey, ...], list[run_fields.Filter], tuple[str, ...]]:
    """The list's sort, filters and fields, or 422 naming the parameter and the fix."""
    if len(filters) > MAX_FILTERS:
        raise InvalidField(["query", "filter"], f"at most {MAX_FILTERS} filters")
    parsers: list[tuple[str, Any]] = [
        ("sort", lambda: run_fields.parse_sort(sort or "")),
        ("filter", lambda: [run_fields.parse_filter(f) for f in filters]),
        ("fields", lambda: run_fields.parse_fields(fields or "")),
    ]
    parsed = []
    for name, parse in parsers:
        try:
            parsed.append(parse())
        except ValueError as exc:
            raise InvalidField(["query", name], str(exc)) from exc
    return parsed[0], parsed[1], parsed[2]


def _check_grammar(sort: str | None, filters: list[str], fields: str | None) -> None:
    """422 for a value outside the schema's pattern that the field checks let through."""
    checks = [("sort", sort, run_field_grammar.SORT), ("fields", fields, run_field_grammar.FIELDS)]
    checks += [("filter", rule, run_field_grammar.FILTER) for rule in filters]
    for name, value, pattern in checks:
        if value is not None and re.search(pattern, value) is None:
            raise InvalidField(
                ["query", name],
                f"{name} {value[:80]!r} is outside the documented grammar (the parameter's "
                "pattern): numbers of at most 20 digits each side and an exponent up to 99, "
                "dates as YYYY-MM-DD[THH:MM[:SS[.ffffff]]][Z|±HH:MM], no ':' in a filtered key",
            )


@fields_router.get("", response_model=RunFieldList, dependencies=[READ])
async def list_run_fields(
    db: DatabaseDep, identity: IdentityDep, project: str | None = None
) -> RunFieldList:
    """The fields runs can be listed, sorted and filtered by (config keys, signals …)."""
    project = project_filter(identity, project)

    def read(session: Session) -> RunFieldList:
        found = repository.list_run_fields(session, project)
        return RunFieldList(data=found, count=len(found))

    return await db.read(read)


@router.get("/{run_id}", response_model=RunPublic, dependencies=[READ])
async def read_run(run: RunRefDep, db: DatabaseDep) -> RunPublic:
    """One run with its tags, by id or name."""
    return await db.read(lambda session: _public(session, run.resolve(session).id))


@router.get("/{run_id}/markers", response_model=MarkerList, dependencies=[READ])
async def read_markers(run: RunRefDep, db: DatabaseDep) -> MarkerList:
    """Restarts, rewinds and learning-rate changes (a jump of 5 % or more after a steady step)."""

    def read(session: Session) -> MarkerList:
        found = markers.run_markers(session, run.resolve(session).id)
        return MarkerList(data=found, count=len(found))

    return await db.read(read)


@router.patch("/{run_id}", response_model=RunPublic, dependencies=[WRITE])
async def update_run(
    run_id: str, data: RunUpdate, db: WriterDep, settings: SettingsDep
) -> RunPublic:
    """Set status, name or summary; a run that ends has its last step checked too."""

    def update(session: Session) -> RunPublic:
        run = repository.update_run(session, feed.run_for_update(session, run_id), data)
        if run.status != "running" and settings.detectors_enabled:
            feed.flush_pending(session, run, settings)
        session.commit()
        return _public(session, run_id)

    return await db.write(update)


HEARTBEAT_EXAMPLE = {"drops": {"process": "5f0c9e", "points": 1200, "steps": 0, "samples": 64}}


@router.post(
    "/{run_id}/heartbeat",
    response_model=Heartbeat,
    dependencies=[WRITE],
    openapi_extra=documented_body(HeartbeatIn, HEARTBEAT_EXAMPLE, required=False),
)
async def heartbeat(run_id: str, request: Request, db: WriterDep) -> Heartbeat:
    """Liveness; ``drops`` records what a trainer process dropped without delivering. The
    body is optional and read as JSON whatever its Content-Type (older clients send none)."""
    raw = await request.body()
    drops = ingest.parse_body(HeartbeatIn, raw, "drops").drops if raw.strip() else None

    def beat(session: Session) -> Heartbeat:
        run = repository.heartbeat(session, repository.get_run(session, run_id), drops)
        session.commit()
        assert run.last_heartbeat_at is not None
        return Heartbeat(
            id=run.id,
            status=run.status,  # type: ignore[arg-type]
            last_heartbeat_at=run.last_heartbeat_at,
            dropped=repository.dropped_total(run),
        )

    return await db.write(beat)


@router.post(
    "/{run_id}/detect",
    response_model=DetectResult,
    dependencies=[WRITE],
    responses={413: {"model": ErrorBody, "description": "past RLGUARD_BACKTEST_TIMEOUT_S"}},
)
async def detect_run(
    run_id: str, data: DetectRequest, db: WriterDep, settings: SettingsDep
) -> DetectResult:
    """Backtest: re-run the detectors over the stored points, live alerts untouched unless asked.

    The replay reads on a read thread, outside the write lock; with ``apply`` a short write
    unit then replaces the run's alerts and detector state. A replay running past
    ``RLGUARD_BACKTEST_TIMEOUT_S`` is cancelled (413): narrow it with ``from_step``/``to_step``.
    """

    if data.apply and (data.from_step > 0 or data.to_step is not None):
        raise Conflict(
            "apply replaces the run's alerts and detector state, so it replays the whole run: "
            "drop from_step and to_step, or backtest the range with apply=false"
        )

    def replay(session: Session) -> feed.Replay:
        run = repository.get_run(session, run_id)
        try:
            return feed.replay_run(
                session,
                run,
                settings,
                data.thresholds,
                first=data.from_step,
                last=data.to_step,
                timeout_s=settings.backtest_timeout_s,
            )
        except ValueError as exc:
            raise InvalidField(["body", "thresholds"], str(exc)) from exc
        except feed.BacktestTooLong as exc:
            raise PayloadTooLarge(str(exc)) from exc

    replayed = await db.read(replay)
    if not data.apply:
        return feed.replay_result(run_id, replayed, applied=False)

    def apply(session: Session) -> DetectResult:
        result = feed.apply_replay(session, feed.run_for_update(session, run_id), replayed)
        session.commit()
        return result

    return await db.write(apply)


@router.post("/{run_id}/rewind", response_model=RunPublic, dependencies=[WRITE])
async def rewind_run(
    run_id: str, data: RunRewind, db: WriterDep, settings: SettingsDep
) -> RunPublic:
    """Supersede the points after ``resume_from_step``; the restarted trainer rewrites them.

    The detectors are replayed over what remains, so their state and alerts match the rewind:
    the replay reads outside the write lock, the write unit removes the points and applies it.
    """
    step = data.resume_from_step
    replayed = await db.read(lambda session: replay_before(session, run_id, step, settings))

    def rewind(session: Session) -> RunPublic:
        run = repository.rewind_run(session, feed.run_for_update(session, run_id), step)
        feed.apply_replay(session, run, replayed)
        session.commit()
        return _public(session, run_id)

    return await db.write(rewind)


def replay_before(session: Session, run_id: str, step: int, settings: Settings) -> feed.Replay:
    """The run's detectors replayed over its stored steps up to ``step`` (a rewind's)."""
    return feed.replay_run(session, repository.get_run(session, run_id), settings, {}, last=step)

"""Series of several runs at once, by canonical signal: what a comparison of runs draws."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from rlguard_backend.api.deps import READ, DatabaseDep, IdentityDep, SettingsDep, project_filter
from rlguard_backend.api.groups import RunIds, Signals, runs_and_signals
from rlguard_backend.api.points import (
    IncludeTimes,
    Smoothing,
    check_max_points,
    max_points_query,
)
from rlguard_backend.core.config import Settings
from rlguard_backend.core.errors import run_not_found
from rlguard_backend.models import Run
from rlguard_backend.schemas import ERROR_RESPONSES, RunSeries, RunSeriesList, Step
from rlguard_backend.store import repository, series

router = APIRouter(prefix="/v1/series", tags=["points"], responses=ERROR_RESPONSES)
# A request returns at most this many times max_series_points points in all (runs × signals ×
# max_points): 2 M by default, where 50 runs × 9 panels × 2,000 points is 0.9 M.
MAX_SERIES_PER_REQUEST = 20
SeriesMaxPoints = Annotated[
    int,
    max_points_query(
        "most points each series returns; when runs × signals × max_points passes "
        f"{MAX_SERIES_PER_REQUEST} × RLGUARD_MAX_SERIES_POINTS, each series returns at most "
        "that total ÷ (runs × signals), and at least 8"
    ),
]


@router.get("", response_model=RunSeriesList, dependencies=[READ])
async def read_runs_series(
    db: DatabaseDep,
    settings: SettingsDep,
    identity: IdentityDep,
    runs: RunIds,
    signals: Signals,
    from_step: Step = 0,
    to_step: Step | None = None,
    max_points: SeriesMaxPoints = 2000,
    smoothing: Smoothing = 0.0,
    include_times: IncludeTimes = False,
) -> Response:
    """Each run (in the order asked) with the series of its first key (by name) of each signal,
    as ``GET /runs/{run_id}/series`` answers it: one request where a comparison of 50 runs
    would otherwise take 150. 404 for an unknown run, 403 for a run of another project than a
    project-limited token's."""
    run_ids, wanted = runs_and_signals(runs, signals)
    check_max_points(max_points, settings)
    max_points = points_per_series(max_points, len(run_ids) * len(wanted), settings)

    def read(session: Session) -> bytes:
        found = {run.id: run for run in session.scalars(select(Run).where(Run.id.in_(run_ids)))}
        for run_id in run_ids:
            if run_id not in found:
                raise run_not_found(run_id)
            project_filter(identity, found[run_id].project)
        tags = repository.run_tags(session, run_ids)
        keys = repository.first_keys(session, run_ids, wanted)
        data = []
        for run_id in run_ids:
            chosen = {s: keys[(run_id, s)] for s in wanted if (run_id, s) in keys}
            by_signal = {
                s: series.read_series(
                    session,
                    key,
                    from_step,
                    to_step,
                    max_points,
                    smoothing=smoothing,
                    include_times=include_times,
                )
                for s, key in chosen.items()
            }
            public = repository.to_public(found[run_id], tags[run_id])
            names = {s: key.name for s, key in chosen.items()}
            data.append(RunSeries(run=public, keys=names, series=by_signal))
        return RunSeriesList(data=data, count=len(data)).model_dump_json().encode()

    return Response(await db.read(read), media_type="application/json")


def points_per_series(max_points: int, series_count: int, settings: Settings) -> int:
    """``max_points``, lowered so that the request returns at most its share of the points a
    request may return (never below 8, the schema's minimum)."""
    most = MAX_SERIES_PER_REQUEST * settings.max_series_points
    return max(min(max_points, most // series_count), 8)

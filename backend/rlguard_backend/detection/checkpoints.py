"""A run's detector checkpoint: the suite's state and its pending step in ``detector_state``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from sqlalchemy.orm import Session

from rlguard.protocol import to_wire
from rlguard_backend.core.config import Settings
from rlguard_backend.detection.suite_cache import Pending
from rlguard_backend.models import DetectorState, utcnow
from rlguard_backend.stability import DetectorSuite
from rlguard_backend.store import sql

SUITE_ROW = "suite"
# The per-batch statements on detector_state, as plain SQL: the ORM's and Core's own work per
# statement cost more than the statements themselves.
_READ_GENERATION = "SELECT generation FROM detector_state WHERE run_id = ? AND detector = ?"
_UPDATE_STATE = (
    "UPDATE detector_state SET state = ?, generation = ?, last_step = ?, updated_at = ? "
    "WHERE run_id = ? AND detector = ?"
)
_INSERT_STATE = (
    "INSERT INTO detector_state (state, generation, last_step, updated_at, run_id, detector) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)


def make_suite(
    config: Mapping[str, Any] | None,
    settings: Settings,
    state: Mapping[str, Any] | None = None,
    thresholds: Mapping[str, Any] | None = None,
) -> DetectorSuite:
    """A suite with the server's thresholds (and `thresholds` over them), from `state` if any."""
    server = {**settings.detector_thresholds, **(thresholds or {})}
    return DetectorSuite(config or {}, thresholds=server, state=state)


def load_checkpoint(session: Session, run_id: str) -> DetectorState | None:
    """The run's detector checkpoint row, None when it has none yet."""
    return session.get(DetectorState, (run_id, SUITE_ROW))


def stored_generation(session: Session, run_id: str) -> str | None:
    """The generation of the run's stored checkpoint, read without the state itself."""
    found = sql.fetchall(session, _READ_GENERATION, (run_id, SUITE_ROW))
    return found[0][0] if found else None


def write_checkpoint(
    session: Session, run_id: str, suite: DetectorSuite, pending: Pending, generation: str
) -> None:
    """Store the suite's state and pending step as checkpoint `generation`."""
    # dump_state and encode_pending leave no non-finite float, so orjson's JSON is exact.
    state = orjson.dumps({"suite": suite.dump_state(), "pending": encode_pending(pending)})
    params = (state.decode(), generation, suite.last_step, utcnow(), run_id, SUITE_ROW)
    if not sql.execute(session, _UPDATE_STATE, params):
        sql.execute(session, _INSERT_STATE, params)


def encode_pending(pending: Pending) -> dict[str, Any] | None:
    """The step still being filled, as JSON (non-finite values as wire strings)."""
    if pending is None:
        return None
    step, values = pending
    return {"step": step, "values": {k: to_wire(v) for k, v in values.items()}}


def decode_pending(raw: Mapping[str, Any] | None) -> Pending:
    """The pending step back from its JSON."""
    if not raw:
        return None
    return int(raw["step"]), {k: float(v) for k, v in raw["values"].items()}

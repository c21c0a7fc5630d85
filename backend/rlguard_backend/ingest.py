"""The batch fast path: decode, check idempotency, upsert points and rollups in one transaction."""

from __future__ import annotations

import json
import math
import zlib
from collections import defaultdict
from collections.abc import Sequence
from itertools import pairwise
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session

from rlguard_backend.core.errors import MalformedRequest, PayloadTooLarge, run_not_found
from rlguard_backend.models import utcnow
from rlguard_backend.schemas import BatchAck, BatchIn
from rlguard_backend.store import points, repository, sql, storage
from rlguard_backend.store.points import Columns

GZIP_WBITS = 16 + zlib.MAX_WBITS
Body = TypeVar("Body", bound=BaseModel)


class InvalidBatch(Exception):
    """The batch is well-formed JSON but some field is invalid (422); ``errors`` name them."""

    def __init__(self, errors: list[dict[str, object]]) -> None:
        super().__init__("invalid batch")
        self.errors = errors


def decode_body(body: bytes, content_encoding: str | None, max_bytes: int) -> bytes:
    """Gunzip when asked, refusing anything that inflates past ``max_bytes``."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise MalformedRequest(f"unsupported Content-Encoding {encoding!r}; send gzip or nothing")
    inflater = zlib.decompressobj(GZIP_WBITS)
    try:
        data = inflater.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise MalformedRequest(f"body is not valid gzip ({exc}); compress it with gzip") from exc
    if len(data) > max_bytes or inflater.unconsumed_tail:
        raise PayloadTooLarge(
            f"batch inflates past {max_bytes} bytes; send fewer steps per batch "
            "(or raise RLGUARD_MAX_BATCH_BYTES)"
        )
    if not inflater.eof:
        raise MalformedRequest("gzip body is truncated; send the complete compressed body")
    return data


def parse_body(model: type[Body], raw: bytes, fields: str) -> Body:
    """``raw`` as ``model``: 400 when it is not a JSON object, 422 naming each invalid field."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        if any(e["type"] == "json_invalid" for e in errors):
            raise MalformedRequest(f"body is not valid JSON: {errors[0]['msg']}") from exc
        if any(e["type"] == "model_type" and not e["loc"] for e in errors):
            raise MalformedRequest(f"body must be a JSON object with {fields}") from exc
        raise InvalidBatch([dict(e) for e in errors]) from exc


def parse_batch(raw: bytes, max_points: int) -> BatchIn:
    """Decode and validate a points batch; 413 past ``max_points``, 422 naming the field."""
    batch = parse_body(BatchIn, raw, "batch_id and steps")
    check_point_count(sum(len(step.values) for step in batch.steps), max_points)
    return batch


def check_point_count(count: int, max_points: int) -> None:
    """413 naming the fix when a batch holds more than ``max_points`` points."""
    if count > max_points:
        raise PayloadTooLarge(
            f"batch holds {count} points, more than the limit of {max_points}; "
            "split it (or raise RLGUARD_MAX_BATCH_POINTS)"
        )


def _by_key(batch: BatchIn) -> tuple[dict[str, Columns], bool]:
    """Each key's points as columns in step order (a later duplicate of a step wins), and
    whether every step logs the same keys, the steps strictly increasing: then each key's
    columns hold the batch's steps in its order."""
    entries = batch.steps
    if not entries:
        return {}, False
    steps = [entry.step for entry in entries]
    times = [math.nan if entry.time is None else entry.time for entry in entries]
    names = tuple(entries[0].values)
    if all(a < b for a, b in pairwise(steps)) and all(
        tuple(entry.values) == names for entry in entries
    ):
        # The usual batch: every step logs the same keys in the same order; zip transposes
        # the steps' values into the keys' columns in one C-level pass.
        columns = zip(*[tuple(entry.values.values()) for entry in entries], strict=True)
        by_key = {
            name: Columns(steps, values, times) for name, values in zip(names, columns, strict=True)
        }
        return by_key, True
    latest: dict[str, dict[int, tuple[float, float]]] = defaultdict(dict)
    for entry, moment in zip(entries, times, strict=True):
        for key, value in entry.values.items():
            latest[key][entry.step] = (value, moment)
    grouped = {}
    for key, by_step in latest.items():
        ordered = sorted(by_step)
        grouped[key] = Columns(
            ordered, [by_step[s][0] for s in ordered], [by_step[s][1] for s in ordered]
        )
    return grouped, False


class Ingested(NamedTuple):
    """What storing a batch found: the answer, the run's config read on the way, and the
    batch's values by key when every step logs the same keys, in step order (else None)."""

    ack: BatchAck
    config: dict[str, Any]
    columns: dict[str, Sequence[float]] | None = None


def lock_run(session: Session, run_id: str) -> tuple[int | None, dict[str, Any]]:
    """The run's last step and config; on PostgreSQL its row stays locked until commit.

    The lock makes one process at a time write a run's batch (its keys' chunk tails) and feed
    its detectors; SQLite has one writer at a time anyway.
    """
    lock = " FOR UPDATE" if sql.dialect(session) == "postgresql" else ""
    found = sql.fetchall(
        session, f"SELECT last_step, config FROM runs WHERE id = ?{lock}", (run_id,)
    )
    if not found:
        raise run_not_found(run_id)
    last_step, config = found[0]
    if isinstance(config, str):  # SQLite hands JSON columns over as text
        config = json.loads(config)
    return last_step, config if isinstance(config, dict) else {}


class Opened(NamedTuple):
    """A batch with its run locked, nothing written yet (open_batch)."""

    ack: BatchAck
    config: dict[str, Any]
    run_last_step: int | None  # the run's newest stored step before this batch
    duplicate: bool


def open_batch(session: Session, run_id: str, batch: BatchIn) -> Opened:
    """Lock the run and check the batch id; writes nothing (store_batch does)."""
    run_last_step, config = lock_run(session, run_id)
    count = sum(len(step.values) for step in batch.steps)
    ack = BatchAck(
        batch_id=batch.batch_id, duplicate=False, points=count, steps=len(batch.steps), alerts=[]
    )
    if batch_seen(session, run_id, batch.batch_id):
        return Opened(ack.model_copy(update={"duplicate": True}), config, run_last_step, True)
    return Opened(ack, config, run_last_step, False)


def store_batch(session: Session, run_id: str, batch: BatchIn, opened: Opened) -> Ingested:
    """Store an opened batch that is not a duplicate: its id, points, rollups and the run's
    last step."""
    assert not opened.duplicate
    # Claim the batch id first: a concurrent duplicate then fails on the primary key (and the
    # caller answers it as a duplicate) instead of writing the points twice.
    now = utcnow()
    sql.execute(
        session,
        "INSERT INTO ingested_batches (run_id, batch_id, points, received_at) VALUES (?, ?, ?, ?)",
        (run_id, batch.batch_id, opened.ack.points, now),
    )
    grouped, uniform = _by_key(batch)
    config, run_last_step = opened.config, opened.run_last_step
    newest = _store(session, run_id, _aliases(config), grouped) if grouped else None
    columns = {key: c.values for key, c in grouped.items()} if uniform and grouped else None
    if newest is not None and (run_last_step is None or newest > run_last_step):
        run_last_step = newest
    sql.execute(
        session,
        "UPDATE runs SET last_step = ?, updated_at = ?, last_heartbeat_at = ? WHERE id = ?",
        (run_last_step, now, now, run_id),
    )
    return Ingested(opened.ack, config, columns)


def ingest_batch(session: Session, run_id: str, batch: BatchIn) -> Ingested:
    """Store ``batch`` for the run completely or not at all; a known batch id writes nothing."""
    opened = open_batch(session, run_id, batch)
    if opened.duplicate:
        return Ingested(opened.ack, opened.config)
    return store_batch(session, run_id, batch, opened)


def _aliases(config: dict[str, Any]) -> dict[str, str] | None:
    aliases = config.get("signal_aliases")
    return aliases if isinstance(aliases, dict) else None


def batch_seen(session: Session, run_id: str, batch_id: str) -> bool:
    """True when this batch id was stored for the run before (a replay)."""
    found = sql.fetchall(
        session,
        "SELECT 1 FROM ingested_batches WHERE run_id = ? AND batch_id = ?",
        (run_id, batch_id),
    )
    return bool(found)


def _store(
    session: Session, run_id: str, aliases: dict[str, str] | None, grouped: dict[str, Columns]
) -> int:
    """Write the points and rollups; returns the newest step in the batch."""
    keys = repository.ensure_key_ids(session, run_id, grouped, aliases)
    by_id = {keys[name][0]: columns for name, columns in grouped.items()}
    before = {keys[name][0]: keys[name][1] for name in grouped}
    after = storage.STORE.store_points(session, by_id, before)
    storage.STORE.update_rollups(
        session, by_id, {key_id: t.last_step for key_id, t in before.items()}
    )
    _store_tails(session, after)
    return max(columns.steps[-1] for columns in grouped.values())


def _store_tails(session: Session, tails: dict[int, points.KeyTail]) -> None:
    """Each key's last step and newest chunk, in ``metric_keys``: one statement on PostgreSQL."""
    rows = [(t.last_step, t.tail_step, t.tail_count, key_id) for key_id, t in tails.items()]
    if not rows:
        return
    if sql.dialect(session) == "postgresql":
        sql.execute_arrays(
            session,
            "UPDATE metric_keys AS k SET last_step = u.last_step, tail_step = u.tail_step, "
            "tail_count = u.tail_count FROM unnest(?::int8[], ?::int8[], ?::int4[], ?::int4[]) "
            "AS u(last_step, tail_step, tail_count, id) WHERE k.id = u.id",
            [list(column) for column in zip(*rows, strict=True)],
        )
        return
    sql.executemany(
        session,
        "UPDATE metric_keys SET last_step = ?, tail_step = ?, tail_count = ? WHERE id = ?",
        rows,
    )

"""The batch fast path: decode, check idempotency, upsert points and rollups in one transaction."""

from __future__ import annotations

import json
import zlib
from collections import defaultdict

from pydantic import ValidationError
from sqlalchemy.orm import Session

from rlguard_backend import points, repository, sql
from rlguard_backend.errors import MalformedRequest, PayloadTooLarge, run_not_found
from rlguard_backend.models import utcnow
from rlguard_backend.schemas import BatchAck, BatchIn

GZIP_WBITS = 16 + zlib.MAX_WBITS


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


def parse_batch(raw: bytes, max_points: int) -> BatchIn:
    try:
        batch = BatchIn.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        if any(e["type"] == "json_invalid" for e in errors):
            raise MalformedRequest(f"body is not valid JSON: {errors[0]['msg']}") from exc
        if any(e["type"] == "model_type" and not e["loc"] for e in errors):
            raise MalformedRequest("body must be a JSON object with batch_id and steps") from exc
        raise InvalidBatch([dict(e) for e in errors]) from exc
    count = sum(len(step.values) for step in batch.steps)
    if count > max_points:
        raise PayloadTooLarge(
            f"batch holds {count} points, more than the limit of {max_points}; "
            "split it (or raise RLGUARD_MAX_BATCH_POINTS)"
        )
    return batch


KeyRows = dict[str, list[tuple[int, float | None, float | None]]]


def _by_key(batch: BatchIn) -> KeyRows:
    """``{key: [(step, stored value, wall_time), ...]}`` by step; a later duplicate wins."""
    grouped: KeyRows = defaultdict(list)
    ordered = True
    previous = -1
    for entry in batch.steps:
        step, moment = entry.step, entry.time
        ordered = ordered and step > previous
        previous = step
        for key, value in entry.values.items():
            # NaN is the only value unequal to itself; it is stored as NULL.
            grouped[key].append((step, None if value != value else value, moment))
    if not ordered:
        for key, rows in grouped.items():
            latest = {step: (step, value, moment) for step, value, moment in rows}
            grouped[key] = [latest[step] for step in sorted(latest)]
    return grouped


def ingest_batch(session: Session, run_id: str, batch: BatchIn) -> BatchAck:
    """Store ``batch`` for the run completely or not at all; a known batch id writes nothing."""
    found = sql.fetchall(session, "SELECT last_step, config FROM runs WHERE id = ?", (run_id,))
    if not found:
        raise run_not_found(run_id)
    run_last_step, config = found[0]
    count = sum(len(step.values) for step in batch.steps)
    ack = BatchAck(
        batch_id=batch.batch_id, duplicate=False, points=count, steps=len(batch.steps), alerts=[]
    )
    if batch_seen(session, run_id, batch.batch_id):
        return ack.model_copy(update={"duplicate": True})
    # Claim the batch id first: a concurrent duplicate then fails on the primary key (and the
    # caller answers it as a duplicate) instead of writing the points twice.
    now = utcnow()
    sql.execute(
        session,
        "INSERT INTO ingested_batches (run_id, batch_id, points, received_at) VALUES (?, ?, ?, ?)",
        (run_id, batch.batch_id, count, now),
    )
    grouped = _by_key(batch)
    newest = _store(session, run_id, _aliases(config), grouped) if grouped else None
    if newest is not None and (run_last_step is None or newest > run_last_step):
        run_last_step = newest
    sql.execute(
        session,
        "UPDATE runs SET last_step = ?, updated_at = ?, last_heartbeat_at = ? WHERE id = ?",
        (run_last_step, now, now, run_id),
    )
    return ack


def _aliases(config: object) -> dict[str, str] | None:
    if isinstance(config, str):
        config = json.loads(config)
    aliases = config.get("signal_aliases") if isinstance(config, dict) else None
    return aliases if isinstance(aliases, dict) else None


def batch_seen(session: Session, run_id: str, batch_id: str) -> bool:
    found = sql.fetchall(
        session,
        "SELECT 1 FROM ingested_batches WHERE run_id = ? AND batch_id = ?",
        (run_id, batch_id),
    )
    return bool(found)


def _store(session: Session, run_id: str, aliases: dict[str, str] | None, grouped: KeyRows) -> int:
    """Write the points and rollups; returns the newest step in the batch."""
    keys = repository.ensure_key_ids(session, run_id, grouped, aliases)
    by_id = {keys[name][0]: rows for name, rows in grouped.items()}
    previous = {keys[name][0]: keys[name][1] for name in grouped}
    points.upsert_points(session, by_id)
    points.update_rollups(session, by_id, previous)
    advanced = [
        (rows[-1][0], key_id)
        for key_id, rows in by_id.items()
        if previous[key_id] is None or rows[-1][0] > previous[key_id]  # type: ignore[operator]
    ]
    sql.executemany(session, "UPDATE metric_keys SET last_step = ? WHERE id = ?", advanced)
    return max(rows[-1][0] for rows in grouped.values())

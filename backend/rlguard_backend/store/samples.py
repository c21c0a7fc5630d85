"""Rollout samples: store a batch idempotently, thin old steps, read them sorted and filtered.

A sample's numbers live in columns so SQL sorts and filters them; its text (with the extra
``scores``) and its per-token arrays are zlib-compressed JSON. Text search therefore runs here,
over the rows the other filters select. Storage verbs take a Session; no commits, no HTTP.

Retention is per run, from its config: ``samples_keep_steps=K`` keeps every sample of the last
K steps (counted back from the run's newest step) and thins each older step to its
``samples_thinned_per_step`` best and as many worst rewards (default 2), applied on ingest;
steps within ``samples_alert_margin_steps`` (default 2) of an alert keep every sample.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rlguard.sample_signals import step_signals  # the one definition, the hook's and ours
from rlguard_backend import ingest
from rlguard_backend.core.errors import PayloadTooLarge
from rlguard_backend.models import Sample, utcnow
from rlguard_backend.schemas import (
    SAMPLE_NUMBER_FIELDS,
    SAMPLE_TEXT_FIELDS,
    BatchIn,
    SampleAck,
    SampleBatchIn,
    SampleIn,
    SampleList,
    SamplePublic,
    SampleTokens,
    StepIn,
)
from rlguard_backend.store import sql

# wire field -> column
COLUMNS = {name: ("group_id" if name == "group" else name) for name in SAMPLE_NUMBER_FIELDS}
SORT_FIELDS = ("step", *SAMPLE_NUMBER_FIELDS)
FILTER_COLUMNS = {**COLUMNS, "index": "sample_index"}  # min_<field> / max_<field>
DEFAULT_THINNED_PER_STEP = 2
DEFAULT_ALERT_MARGIN_STEPS = 2
_STORED = [
    ("run_id", "text"),
    ("split", "text"),
    ("step", "int8"),
    ("sample_index", "int4"),
    ("wall_time", "float8"),
    *((column, "float8") for column in COLUMNS.values()),
    ("cut", "bool"),
    ("text_data", "bytea"),
    ("token_data", "bytea"),
]
_UPSERT = "ON CONFLICT (run_id, split, step, sample_index) DO UPDATE SET " + ", ".join(
    f"{name} = excluded.{name}" for name, _ in _STORED[4:]
)
_READ_COLUMNS = "split, step, sample_index, wall_time, " + ", ".join(COLUMNS.values())


def parse_samples(raw: bytes, max_samples: int) -> SampleBatchIn:
    """The batch, refused when invalid or too large; a sample named twice is kept once."""
    batch = ingest.parse_body(SampleBatchIn, raw, "batch_id and samples")
    if len(batch.samples) > max_samples:
        raise PayloadTooLarge(
            f"batch holds {len(batch.samples)} samples, more than the limit of {max_samples}; "
            "split it (or raise RLGUARD_MAX_BATCH_SAMPLES)"
        )
    # A sample named twice in one batch is stored once, the later one, as a later batch's
    # sample of a stored (split, step, index) replaces it (one row can take one upsert).
    latest = {(s.split, s.step, s.index): s for s in batch.samples}
    if len(latest) < len(batch.samples):
        batch.samples = list(latest.values())
    return batch


def store_samples(session: Session, run_id: str, batch: SampleBatchIn) -> SampleAck:
    """Store the batch (a sample of a stored step and index replaces it); a known batch id
    writes nothing. Locks the run first, as ingest of points does."""
    _, config = ingest.lock_run(session, run_id)
    ack = SampleAck(batch_id=batch.batch_id, duplicate=False, samples=len(batch.samples))
    if ingest.batch_seen(session, run_id, batch.batch_id):
        return ack.model_copy(update={"duplicate": True})
    sql.execute(
        session,
        "INSERT INTO ingested_batches (run_id, batch_id, points, received_at) VALUES (?, ?, ?, ?)",
        (run_id, batch.batch_id, len(batch.samples), utcnow()),
    )
    retention = _retention(config)
    newest_before = _newest_step(session, run_id) if retention else None
    rows = [_row(run_id, sample) for sample in batch.samples]
    sql.bulk_insert(session, "samples", _STORED, rows, _UPSERT)
    if retention and batch.samples:
        oldest = min(s.step for s in batch.samples)
        since = oldest if newest_before is None else min(oldest, newest_before)
        _thin(session, run_id, retention, since)
    return ack


def derived_signals(batch: SampleBatchIn) -> BatchIn | None:
    """The ``samples/*`` signals of the batch's training steps, as points for the detectors,
    when the client did not log them itself (``signals_logged``); None when there are none.

    The batch id is derived from the samples batch's, so a replay derives nothing twice.
    """
    if batch.signals_logged:
        return None
    by_step: dict[int, list[SampleIn]] = defaultdict(list)
    for sample in batch.samples:
        if sample.split == "train":
            by_step[sample.step].append(sample)
    steps = []
    for step, samples in sorted(by_step.items()):
        records = [
            {
                "response": s.response,
                "truncated": s.truncated,
                "malformed": s.scores.get("malformed"),
            }
            for s in samples
        ]
        values = step_signals(records)
        if values:
            times = [s.time for s in samples if s.time is not None]
            steps.append(StepIn(step=step, time=max(times) if times else None, values=values))
    if not steps:
        return None
    digest = hashlib.sha256(batch.batch_id.encode()).hexdigest()[:40]
    return BatchIn(batch_id=f"signals-{digest}", steps=steps)


def _newest_step(session: Session, run_id: str) -> int | None:
    found = sql.fetchall(session, "SELECT MAX(step) FROM samples WHERE run_id = ?", (run_id,))
    return None if found[0][0] is None else int(found[0][0])


def _pack(payload: dict[str, Any]) -> bytes:
    return zlib.compress(json.dumps(payload, ensure_ascii=False).encode(), 6)


def _unpack(blob: bytes | None) -> dict[str, Any]:
    return {} if blob is None else dict(json.loads(zlib.decompress(blob)))


def _row(run_id: str, sample: SampleIn) -> tuple[Any, ...]:
    texts = {name: getattr(sample, name) for name in SAMPLE_TEXT_FIELDS}
    tokens = sample.tokens.model_dump(exclude_none=True) if sample.tokens else None
    return (
        run_id,
        sample.split,
        sample.step,
        sample.index,
        sample.time,
        *(getattr(sample, name) for name in COLUMNS),
        sample.cut,
        _pack({**texts, "scores": sample.scores}),
        _pack(tokens) if tokens else None,
    )


def _retention(config: dict[str, Any]) -> tuple[int, int, int] | None:
    """The run's ``(keep_steps, thinned_per_step, alert_margin_steps)``; None keeps all."""
    keys = ("samples_keep_steps", "samples_thinned_per_step", "samples_alert_margin_steps")
    defaults = (None, DEFAULT_THINNED_PER_STEP, DEFAULT_ALERT_MARGIN_STEPS)
    values = [config.get(key, default) for key, default in zip(keys, defaults, strict=True)]
    numbers = [v for v in values if type(v) is int and v >= 0]
    if len(numbers) != len(values):
        return None
    return numbers[0], numbers[1], numbers[2]


def _thin(session: Session, run_id: str, retention: tuple[int, int, int], since: int) -> None:
    """Apply the run's retention to the steps from ``since - samples_keep_steps`` (where the
    last batch left off, or this batch's oldest step) up to ``samples_keep_steps`` before the
    newest, sparing the steps near any of the run's alerts."""
    keep_steps, per_step, margin = retention
    below = (_newest_step(session, run_id) or 0) - keep_steps + 1
    lo = min(since - keep_steps, below)
    scope = "run_id = ? AND step >= ? AND step < ?"
    sql.execute(
        session,
        f"DELETE FROM samples WHERE {scope} AND (split, step, sample_index) NOT IN ("
        "SELECT split, step, sample_index FROM (SELECT split, step, sample_index, "
        "ROW_NUMBER() OVER (PARTITION BY split, step ORDER BY COALESCE(reward, -1e308) DESC, "
        "sample_index) AS best, "
        "ROW_NUMBER() OVER (PARTITION BY split, step ORDER BY COALESCE(reward, 1e308), "
        f"sample_index) AS worst FROM samples WHERE {scope}) AS ranked "
        "WHERE best <= ? OR worst <= ?) AND NOT EXISTS (SELECT 1 FROM alerts "
        "WHERE alerts.run_id = samples.run_id "
        "AND samples.step BETWEEN alerts.first_step - ? AND alerts.last_step + ?)",
        (run_id, lo, below, run_id, lo, below, per_step, per_step, margin, margin),
    )


@dataclass
class SampleQuery:
    """What a read asks for: a step range, numeric ranges, a text, an order and a page."""

    from_step: int = 0
    to_step: int | None = None
    split: str = "train"
    ranges: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    text: str | None = None
    sort: str = "step"
    descending: bool = False
    limit: int = 100
    offset: int = 0
    tokens: bool = False


def read_samples(
    session: Session, run_id: str, query: SampleQuery, max_search_rows: int = 50_000
) -> SampleList:
    """The run's samples matching ``query``, one page of them, and how many match; a text
    search reads at most ``max_search_rows`` rows."""
    where, params = _where(run_id, query)
    columns = _READ_COLUMNS + ", cut, text_data" + (", token_data" if query.tokens else "")
    select = f"SELECT {columns} FROM samples WHERE {where} ORDER BY {_order(query)}"
    (count,) = sql.fetchall(session, f"SELECT COUNT(*) FROM samples WHERE {where}", params)[0]
    if query.text is None:
        rows = sql.fetchall(
            session, f"{select} LIMIT ? OFFSET ?", [*params, query.limit, query.offset]
        )
        return SampleList(data=[_public(run_id, row) for row in rows], count=count)
    if count > max_search_rows:
        raise PayloadTooLarge(
            f"the text search would read {count} samples, more than {max_search_rows}; narrow "
            "it with step, from_step/to_step or min_/max_ filters (or raise "
            "RLGUARD_MAX_SAMPLE_SEARCH_ROWS)"
        )
    needle = query.text.casefold()
    found = [
        sample
        for sample in (_public(run_id, row) for row in sql.fetchall(session, select, params))
        if any(needle in (getattr(sample, name) or "").casefold() for name in SAMPLE_TEXT_FIELDS)
    ]
    return SampleList(data=found[query.offset : query.offset + query.limit], count=len(found))


def _where(run_id: str, query: SampleQuery) -> tuple[str, list[Any]]:
    clauses = ["run_id = ?", "split = ?", "step >= ?"]
    params: list[Any] = [run_id, query.split, query.from_step]
    if query.to_step is not None:
        clauses.append("step <= ?")
        params.append(query.to_step)
    for name, (low, high) in query.ranges.items():
        for bound, operator in ((low, ">="), (high, "<=")):
            if bound is not None:
                clauses.append(f"{FILTER_COLUMNS[name]} {operator} ?")
                params.append(bound)
    return " AND ".join(clauses), params


def _order(query: SampleQuery) -> str:
    direction = "DESC" if query.descending else "ASC"
    if query.sort == "step":
        return f"step {direction}, sample_index {direction}"
    column = COLUMNS[query.sort]
    return f"({column} IS NULL), {column} {direction}, step, sample_index"


def _public(run_id: str, row: tuple[Any, ...]) -> SamplePublic:
    split, step, index, wall_time, *numbers = row[: 4 + len(COLUMNS)]
    cut, text_data, *token_data = row[4 + len(COLUMNS) :]
    texts = _unpack(text_data)
    tokens = SampleTokens(**_unpack(token_data[0])) if token_data and token_data[0] else None
    return SamplePublic(
        run_id=run_id,
        step=step,
        index=index,
        split=split,
        time=wall_time,
        **{name: texts.get(name) for name in SAMPLE_TEXT_FIELDS},
        **dict(zip(COLUMNS, numbers, strict=True)),
        scores=texts.get("scores") or {},
        cut=bool(cut),
        tokens=tokens,
    )


def sample_steps(session: Session, run_id: str, split: str) -> list[tuple[int, int]]:
    """(step, samples) for every step of the run that holds samples of ``split``."""
    rows = session.execute(
        select(Sample.step, func.count())
        .where(Sample.run_id == run_id, Sample.split == split)
        .group_by(Sample.step)
        .order_by(Sample.step)
    ).all()
    return [(int(step), int(count)) for step, count in rows]

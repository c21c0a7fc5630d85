"""SQLAlchemy 2.0 ORM models. The schema itself comes only from Alembic migrations."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    """The current time, timezone-aware UTC (every stored time is UTC)."""
    return datetime.now(timezone.utc)


def as_utc(moment: datetime) -> datetime:
    """SQLite hands datetimes back naive; every stored time is UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    project: Mapped[str] = mapped_column(String(128), index=True)
    name: Mapped[str | None] = mapped_column(String(256))
    status: Mapped[str] = mapped_column(String(16), default="running", index=True)
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    summary: Mapped[dict[str, Any]] = mapped_column(default=dict)
    last_step: Mapped[int | None] = mapped_column(BigInteger)
    resume_from_step: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    archived_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # What the run's trainer processes dropped undelivered: {process: {points, steps, samples}}
    client_drops: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class RunTag(Base):
    __tablename__ = "run_tags"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(128), primary_key=True, index=True)


class RunEvent(Base):
    """A restart (a new trainer process resumed the run) or a rewind, at the step it happened."""

    __tablename__ = "run_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # "restart" | "rewind"
    step: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RunCommand(Base):
    """A stop or checkpoint request for a run's trainer: who asked, why, delivery, action."""

    __tablename__ = "run_commands"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # "stop" | "checkpoint"
    reason: Mapped[str | None] = mapped_column(Text)
    requested_by: Mapped[str] = mapped_column(String(256))
    alert_id: Mapped[int | None] = mapped_column(Integer)
    requested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    requested_step: Mapped[int | None] = mapped_column(BigInteger)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    acted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    acted_step: Mapped[int | None] = mapped_column(BigInteger)
    policy_id: Mapped[int | None] = mapped_column(Integer)  # None: a person asked
    dry_run: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class CommandPolicy(Base):
    """A project's rule: stop (or checkpoint) a run when an alert reaches a severity and
    persists ``persist_steps``; a dry-run policy only records what it would have done."""

    __tablename__ = "command_policies"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project: Mapped[str] = mapped_column(String(128), index=True)
    alert: Mapped[str] = mapped_column(String(128))  # "detector" or "detector/key"
    severity: Mapped[str] = mapped_column(String(16))
    persist_steps: Mapped[int] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(16))  # "stop" | "checkpoint"
    dry_run: Mapped[bool] = mapped_column(Boolean)
    created_by: Mapped[str] = mapped_column(String(256))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class MetricKey(Base):
    __tablename__ = "metric_keys"
    __table_args__ = (UniqueConstraint("run_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(256))
    signal: Mapped[str | None] = mapped_column(String(64))
    last_step: Mapped[int | None] = mapped_column(BigInteger)
    # The key's newest chunk (the one small appends grow): its first step and point count.
    tail_step: Mapped[int | None] = mapped_column(BigInteger)
    tail_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class PointChunk(Base):
    """A run of one key's points, packed: steps (int64), values and wall times (float64).

    The three blobs hold ``count`` little-endian numbers each, in strictly increasing step
    order; NaN is NaN in ``value_data`` and a missing wall time is NaN in ``time_data``. Chunks
    of a key never overlap: each step lives in exactly one chunk, found by ``first_step``.
    One row per key per batch (instead of one per point) is what makes ingest fast; see
    ``points.py`` for how chunks grow, split and are rewritten.

    No foreign key on ``key_id``: PostgreSQL checks one per row, and the table is meant to be
    partitioned by time at scale.
    """

    __tablename__ = "point_chunks"

    key_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    first_step: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    last_step: Mapped[int] = mapped_column(BigInteger)
    count: Mapped[int] = mapped_column(Integer)
    step_data: Mapped[bytes] = mapped_column(LargeBinary)
    value_data: Mapped[bytes] = mapped_column(LargeBinary)
    time_data: Mapped[bytes] = mapped_column(LargeBinary)


class Rollup(Base):
    """Summary of one key over one aligned bucket of ``BUCKET_WIDTHS[level]`` steps."""

    __tablename__ = "rollups"
    __table_args__ = {"sqlite_with_rowid": False}

    key_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    level: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    bucket: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    count: Mapped[int] = mapped_column(Integer)
    first_step: Mapped[int] = mapped_column(BigInteger)
    first_value: Mapped[float | None] = mapped_column(Double)
    last_step: Mapped[int] = mapped_column(BigInteger)
    last_value: Mapped[float | None] = mapped_column(Double)
    min_step: Mapped[int] = mapped_column(BigInteger)
    min_value: Mapped[float | None] = mapped_column(Double)
    max_step: Mapped[int] = mapped_column(BigInteger)
    max_value: Mapped[float | None] = mapped_column(Double)


class IngestedBatch(Base):
    __tablename__ = "ingested_batches"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    batch_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    points: Mapped[int] = mapped_column(Integer)
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Alert(Base):
    """One alert of one run; at most one open alert per (run, detector, key)."""

    __tablename__ = "alerts"
    __table_args__ = (Index("ix_alerts_run_detector_key", "run_id", "detector", "key", "status"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    detector: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(String(128), default="", server_default="")
    severity: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default="open", index=True)
    secondary: Mapped[bool] = mapped_column(Boolean, default=False)
    acknowledged: Mapped[bool] = mapped_column(Boolean, default=False)
    # resolved because its run ended (finished, stopped, failed), not because it cleared
    closed_with_run: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    first_step: Mapped[int] = mapped_column(BigInteger)
    last_step: Mapped[int] = mapped_column(BigInteger)
    message: Mapped[str] = mapped_column(Text)
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)
    advice: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class StoredWebhook(Base):
    """A webhook managed over REST: where a project's (or every project's) alert changes go.

    ``secret`` signs each message (HMAC-SHA256); the API shows it once, then a prefix only.
    """

    __tablename__ = "webhooks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project: Mapped[str | None] = mapped_column(String(128))
    url: Mapped[str] = mapped_column(String(2048))
    format: Mapped[str] = mapped_column(String(16))
    min_severity: Mapped[str] = mapped_column(String(16))
    events: Mapped[list[Any]] = mapped_column(default=list)
    secret: Mapped[str] = mapped_column(String(128))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    created_by: Mapped[str] = mapped_column(String(128))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class WebhookDelivery(Base):
    """The durable outbox: one message per alert state change and webhook target.

    ``hook_id`` names a stored webhook (``target`` is then ``hook:<id>``; delivery reads the
    hook's url, format and secret as they are then), or is null for a server-wide one of
    ``RLGUARD_WEBHOOKS`` (``target`` is its url). Deleting a hook deletes its waiting rows.
    """

    __tablename__ = "webhook_outbox"
    __table_args__ = (UniqueConstraint("alert_id", "change", "target"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    alert_id: Mapped[int] = mapped_column(ForeignKey("alerts.id", ondelete="CASCADE"))
    change: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(512))
    hook_id: Mapped[int | None] = mapped_column(
        ForeignKey("webhooks.id", ondelete="CASCADE"), index=True
    )
    format: Mapped[str] = mapped_column(String(16))
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class DetectorState(Base):
    __tablename__ = "detector_state"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    detector: Mapped[str] = mapped_column(String(64), primary_key=True)
    last_step: Mapped[int | None] = mapped_column(BigInteger)
    state: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # A new random id per write: a process whose cached suite carries the stored generation
    # may skip reading the state (suite_cache.SuiteCache).
    generation: Mapped[str | None] = mapped_column(String(32))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ApiToken(Base):
    """An API token: its lookup id, and the salted SHA-256 of its secret (see ``auth``)."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128))
    lookup: Mapped[str] = mapped_column(String(8), unique=True)
    salt: Mapped[str] = mapped_column(String(32))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scope: Mapped[str] = mapped_column(String(8))
    project: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Sample(Base):
    """One rollout sample: its numbers in columns (sorted and filtered in SQL), its text and
    per-token arrays as zlib-compressed JSON (``samples.py`` packs and unpacks them)."""

    __tablename__ = "samples"
    __table_args__ = (Index("ix_samples_run_reward", "run_id", "split", "reward"),)

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    split: Mapped[str] = mapped_column(String(32), primary_key=True)
    step: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    sample_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    wall_time: Mapped[float | None] = mapped_column(Double)
    reward: Mapped[float | None] = mapped_column(Double)
    advantage: Mapped[float | None] = mapped_column(Double)
    length: Mapped[float | None] = mapped_column(Double)
    truncated: Mapped[float | None] = mapped_column(Double)
    group_id: Mapped[float | None] = mapped_column(Double)
    logprob: Mapped[float | None] = mapped_column(Double)
    entropy: Mapped[float | None] = mapped_column(Double)
    kl: Mapped[float | None] = mapped_column(Double)
    cut: Mapped[bool] = mapped_column(Boolean, default=False)
    text_data: Mapped[bytes] = mapped_column(LargeBinary)
    token_data: Mapped[bytes | None] = mapped_column(LargeBinary)

"""The service's own Prometheus metrics, in a registry of each app (no global state).

Counters and histograms are updated where the work happens (ingest, database errors); the
write gate's and the body budget's figures are their own counts, read at scrape time; the
alert and outbox gauges are read from the database at scrape time, so every replica reports
the same shared figures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rlguard_backend.core.capacity import BodyBudget, WriteGate
from rlguard_backend.core.stalls import WritesInFlight
from rlguard_backend.models import Alert, WebhookDelivery

SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SEVERITIES = ("info", "warn", "critical")


class ServiceMetrics:
    """What ``GET /metrics`` shows.

    >>> metrics = ServiceMetrics()
    >>> metrics.points.inc(500)
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.batches = Counter(
            "rlguard_ingest_batches", "Batches answered, by outcome", ["outcome"], registry=r
        )
        self.points = Counter("rlguard_points_stored", "Points stored by ingest", registry=r)
        self.batch_seconds = Histogram(
            "rlguard_batch_seconds",
            "One batch's unit of work: parse, store, detect, commit",
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.detector_seconds = Histogram(
            "rlguard_detector_seconds",
            "The detectors' part of one batch",
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.database_errors = Counter(
            "rlguard_database_errors", "Requests that failed on the database", registry=r
        )
        self.open_alerts = Gauge(
            "rlguard_open_alerts", "Open alerts of all runs, by severity", ["severity"], registry=r
        )
        self.webhook_outbox = Gauge(
            "rlguard_webhook_outbox", "Webhook messages not yet delivered", registry=r
        )

    def watch_capacity(self, gate: WriteGate, budget: BodyBudget, writes: WritesInFlight) -> None:
        """Show the write gate's, the body budget's and the writes' own figures at every scrape."""
        self.registry.register(CapacityCollector(gate, budget, writes))

    def read_database(self, session: Session) -> None:
        """Set the gauges that come from the shared database (called at scrape time)."""
        counts = dict(
            session.execute(
                select(Alert.severity, func.count())
                .where(Alert.status == "open")
                .group_by(Alert.severity)
            ).all()
        )
        for severity in SEVERITIES:
            self.open_alerts.labels(severity).set(counts.get(severity, 0))
        pending = session.scalar(
            select(func.count())
            .select_from(WebhookDelivery)
            .where(WebhookDelivery.delivered_at.is_(None))
        )
        self.webhook_outbox.set(pending or 0)


class CapacityCollector(Collector):
    """The write gate's and the body budget's counts as metrics (one count each, kept by them)."""

    FIGURES: tuple[tuple[type[Metric], str, str, Callable[[WriteGate, BodyBudget], int]], ...] = (
        (
            CounterMetricFamily,
            "rlguard_writes_refused",
            "Writes answered 503 by the write gate",
            lambda gate, _budget: gate.refused_total,
        ),
        (
            GaugeMetricFamily,
            "rlguard_writes_in_flight",
            "Writes admitted and not yet answered",
            lambda gate, _budget: gate.in_flight,
        ),
        (
            CounterMetricFamily,
            "rlguard_bodies_refused",
            "Requests answered 503 because their body did not fit the in-flight body budget",
            lambda _gate, budget: budget.refused_total,
        ),
        (
            GaugeMetricFamily,
            "rlguard_body_bytes_in_flight",
            "Bytes of request bodies the process holds now",
            lambda _gate, budget: budget.held,
        ),
    )

    def __init__(self, gate: WriteGate, budget: BodyBudget, writes: WritesInFlight) -> None:
        self.gate = gate
        self.budget = budget
        self.writes = writes

    def collect(self) -> Iterator[Metric]:
        """The figures at this instant."""
        for family, name, documentation, read in self.FIGURES:
            yield family(name, documentation, value=read(self.gate, self.budget))  # type: ignore[call-arg]
        yield from self._stalls()

    def _stalls(self) -> Iterator[Metric]:
        """How long the oldest write of each route has been in flight, and the lock's hold."""
        oldest = GaugeMetricFamily(
            "rlguard_write_oldest_seconds",
            "Age of the oldest write in flight, per route (absent: none in flight)",
            labels=["route"],
        )
        for route, age_s in self.writes.oldest_by_route().items():
            oldest.add_metric([route], age_s)
        yield oldest
        hold = self.writes.longest_hold()
        yield GaugeMetricFamily(
            "rlguard_write_lock_held_seconds",
            "How long the write holding the lock longest has held it (0: none holds it)",
            value=0.0 if hold is None else hold.held_s,
        )
        yield CounterMetricFamily(
            "rlguard_write_holds_over_limit",
            "Writes that held the write lock past RLGUARD_WRITE_HOLD_WARN_S (each logged)",
            value=self.writes.holds_over_limit_total,
        )

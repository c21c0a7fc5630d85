"""The sender: one background thread per run that drains the log queue and delivers it.

Three layers, as in TensorBoard's event writer: ``Run.log`` (the public face) appends raw
entries to ``Sender.queue``; ``Sender`` owns the queue and the thread (start, flush, close);
``Sender._loop`` is the thread: every ``flush_interval_s`` it converts what was logged into
batches (``_points``, ``_sample_batches``), posts them, spools them on failure, replays the spool
oldest first and backs off (``min(base·2^n, cap)`` with jitter) while the service is away.
"""

from __future__ import annotations

import collections
import functools
import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from rlguard import _packed, _samples
from rlguard._config import HookConfig
from rlguard._points import PointBatcher
from rlguard._queue import STOP, FlushMarker, LogQueue, has_markers
from rlguard._report import Counters, DropReport, Warnings, spool_room_message
from rlguard._sample_batches import SampleBatcher
from rlguard._spool import POINTS, SAMPLES, Spool, SpooledBatch, kept_up_to
from rlguard._transport import Transport
from rlguard.errors import RejectedError, RetryableError, SpoolError, TransportError
from rlguard.sample_signals import SampleSignals

logger = logging.getLogger("rlguard")


class Sender:
    """Owns the log queue, the spool and the thread that delivers them to the service."""

    def __init__(
        self,
        cfg: HookConfig,
        run_payload: dict[str, Any],
        on_alert: Callable[[dict[str, Any]], None],
        on_command: Callable[[dict[str, Any]], None] = lambda command: None,
    ) -> None:
        self.cfg = cfg
        self.queue = LogQueue(cfg.max_queue_bytes)
        self.counters = Counters()
        self._warnings = Warnings()
        self._point_batcher = PointBatcher(
            cfg.max_batch_points,
            self.counters,
            self._warnings,
            functools.partial(self._deliver, POINTS),
        )
        self._sample_batcher = SampleBatcher(
            _samples.SampleShaper(cfg.max_samples_per_step, cfg.max_sample_bytes),
            self.counters,
            self._warnings,
            functools.partial(self._deliver, SAMPLES),
        )
        self._sample_signals = SampleSignals()
        self.error: BaseException | None = None  # a bug in the thread, surfaced by status()
        self.spool = Spool(cfg.spool_dir, cfg.run_id, cfg.spool_budget_bytes)
        self._transport = Transport(cfg.url, cfg.token, cfg.request_timeout_s)
        self._run_payload = run_payload
        self._on_alert = on_alert
        self._on_command = on_command
        self._commands_seen: set[int] = set()
        # (command id, step, acted): what the thread reports to the service, in order
        self._command_reports: queue.SimpleQueue[tuple[int, int | None, bool]] = queue.SimpleQueue()
        self._unsent_reports: list[tuple[int, int | None, bool]] = []
        self._last_contact = time.monotonic()
        self._wake = threading.Event()
        self._run_created = False
        self._run_rejected: RejectedError | None = None
        self._run_json_written = False
        self._backlog: collections.deque[SpooledBatch] = collections.deque()
        self._inherited: set[str] = set()
        self._failures = 0
        self._retry_at = 0.0
        self._next_heartbeat = 0.0
        self._close_deadline = float("inf")
        self._final: dict[str, Any] | None = None
        self._packed_refused = False  # a service older than the packed body: send JSON
        self._drops = DropReport(self.counters, self.queue, self._warnings)
        self._thread = threading.Thread(
            target=self._loop, name=f"rlguard-sender-{cfg.run_id}", daemon=True
        )

    # ---- the caller's side -------------------------------------------------------------------

    def start(self) -> None:
        """Start the sender thread."""
        self._thread.start()

    def flush(self, timeout_s: float) -> bool:
        """Wait until everything logged so far is sent or on disk; False on timeout."""
        if not self._thread.is_alive():
            return False
        marker = FlushMarker()
        self.queue.append(marker)
        self._wake.set()
        return marker.done.wait(timeout_s)

    def close(self, status: str, summary: dict[str, Any], timeout_s: float) -> bool:
        """Deliver what is queued, replay the spool and set the run's status, within a bound."""
        if not self._thread.is_alive():
            return True
        self._final = {"status": status, "summary": summary}
        self._close_deadline = time.monotonic() + timeout_s
        self.queue.append(STOP)
        self._wake.set()
        self._thread.join(timeout_s + 1.0)
        return not self._thread.is_alive()

    def report_command(self, command_id: int, step: int | None) -> None:
        """Tell the service the trainer acted on a command (sent by the thread, never here)."""
        self._command_reports.put((command_id, step, True))
        self._wake.set()

    def backlog_points(self, kind: str = POINTS) -> tuple[int, int]:
        """Batches and points (or samples, for kind ``"s"``) still in the spool."""
        backlog = [b for b in list(self._backlog) if b.kind == kind]
        return len(backlog), sum(b.points for b in backlog)

    # ---- the thread --------------------------------------------------------------------------

    def _loop(self) -> None:
        markers: list[FlushMarker] = []
        try:
            self._adopt_spool()
            stop = False
            while not stop:
                self._wake.wait(self.cfg.flush_interval_s)
                self._wake.clear()
                stop = self._drain(markers)
                for marker in markers:
                    marker.done.set()
                markers.clear()
                self._replay(time.monotonic() + self.cfg.flush_interval_s)
                self._heartbeat_if_due()
                self._poll_commands_if_due()
                self._send_command_reports()
            self._shutdown()
        except BaseException as exc:  # a bug here must not pass silently, nor reach training
            self.error = exc
            self.counters.last_error = f"sender thread failed: {exc!r}"
            logger.exception("rlguard: the sender thread failed; logging for this run stopped")
        finally:
            for marker in markers:
                marker.done.set()
            self._transport.close()

    def _adopt_spool(self) -> None:
        """Take over batches an earlier process of this run left in the spool."""
        batches = self.spool.pending()
        if batches:
            self._backlog.extend(batches)
            self._inherited = {b.batch_id for b in batches}
            logger.info(
                "rlguard: replaying %d batch(es) left in %s by an earlier process",
                len(batches),
                self.spool.dir,
            )

    def _drain(self, markers: list[FlushMarker]) -> bool:
        """Convert and ship everything queued; True when the stop sentinel was reached."""
        queued, sample_entries = self.queue.take()
        self._drops.warn_queue_full(self.cfg.max_queue_mb)
        # What the samples say about their steps goes with those steps' metrics, in one batch
        signals = self._sample_signals.read(sample_entries)
        self.counters.sample_signal_points += sum(map(len, signals.values()))
        entries, stopped = _entries_before_stop(queued, markers)
        self._point_batcher.add_all(entries, signals)
        self._point_batcher.ship()
        self._sample_batcher.ship(sample_entries)
        self.queue.release()
        return stopped

    def _deliver(self, kind: str, batch_id: str, count: int, body: bytes) -> None:
        """Post one batch, or spool it while the service is away or older batches wait."""
        if self._backlog or time.monotonic() < self._retry_at:
            self._spool_put(batch_id, count, body, kind)  # keeps the order: oldest first
            return
        try:
            self._post(body, kind)
        except RetryableError as exc:
            self._note_failure(exc)
            self._spool_put(batch_id, count, body, kind)
        except RejectedError as exc:
            self._dead_letter(body, count, exc, kind)
        else:
            self.counters.add(kind, "sent", count)

    def _post(self, body: bytes, kind: str = POINTS) -> None:
        """Post one batch, creating the run first if needed, and hand its alerts over."""
        if self._run_rejected is not None:
            raise self._run_rejected
        self._ensure_run()
        try:
            ack = self._send(body, kind)
        except RejectedError as exc:
            if exc.status != 404:
                raise
            self._run_created = False  # the service lost the run (a fresh database): create again
            self._ensure_run()
            ack = self._send(body, kind)
        self._note_success()
        for alert in (ack or {}).get("alerts", []):
            self._on_alert(alert)
        self._receive_commands((ack or {}).get("commands", []))

    def _send(self, body: bytes, kind: str) -> Any:
        """Post one body; a packed one goes as JSON to a service that does not read it."""
        packed = kind == POINTS and _packed.is_packed(body)
        if packed and self._packed_refused:
            body = _packed.to_json_body(body)
        try:
            return self._transport.post_kind(kind, self.cfg.run_id, body)
        except RejectedError as exc:
            if not packed or self._packed_refused or exc.status not in (400, 415):
                raise
            self._packed_refused = True
            self._warnings.warn_once(
                "packed-refused",
                f"rlguard: the service at {self.cfg.url} does not read packed batches ({exc}); "
                "sending JSON instead, which costs more CPU a step: upgrade the service",
            )
            return self._transport.post_kind(kind, self.cfg.run_id, _packed.to_json_body(body))

    def _ensure_run(self) -> None:
        if self._run_created:
            return
        try:
            self._transport.create_run(self._run_payload)
        except RejectedError as exc:
            self._run_rejected = exc
            self._warnings.warn_once(
                "run-rejected",
                f"rlguard: the service refused run "
                f"{self.cfg.run_id!r}: {exc}; its batches go to the dead letters",
            )
            raise
        self._run_created = True
        self._run_payload = {**self._run_payload, "resume_from_step": None}  # rewind once only

    def _spool_put(self, batch_id: str, points: int, body: bytes, kind: str = POINTS) -> None:
        try:
            self._write_run_json()
            batch = self._put_making_room(batch_id, points, body, kind)
        except (SpoolError, OSError) as exc:
            full = isinstance(exc, SpoolError) and exc.disk_full
            self._drops.spool_failed(kind, points, exc, full)
            return
        if batch is None:  # larger than the whole budget
            self._drops.drop(kind, points, "spool-full", self._room_message("reached its budget"))
            return
        self._backlog.append(batch)
        self.counters.add(kind, "spooled", points)

    def _put_making_room(
        self, batch_id: str, points: int, body: bytes, kind: str
    ) -> SpooledBatch | None:
        """Spool one batch; while the spool's budget is reached or its disk is full, drop the
        oldest spooled samples, then the oldest points, to make room (the README's policy)."""
        while self._backlog and not self.spool.fits(len(body)):
            self._drop_oldest("spool-full", self._room_message("reached its budget"))
        while True:
            try:
                return self.spool.put(batch_id, points, body, kind)
            except SpoolError as exc:
                if not (exc.disk_full and self._backlog):
                    raise
                self._drop_oldest("spool-disk-full", self._room_message(f"cannot grow ({exc})"))

    def _drop_oldest(self, cause: str, message: str) -> None:
        victim = next((b for b in self._backlog if b.kind == SAMPLES), self._backlog[0])
        self._backlog.remove(victim)
        self.spool.remove(victim, victim.size)
        self._drops.drop(victim.kind, victim.points, cause, message)

    def _room_message(self, problem: str) -> str:
        return spool_room_message(self.spool.dir, problem, self.cfg.spool_budget_mb)

    def _replay(self, until: float) -> None:
        """Post spooled batches oldest first while the service answers and time remains."""
        while self._backlog and time.monotonic() >= self._retry_at:
            batch = self._backlog[0]
            body = self.spool.read(batch)
            points = batch.points
            resume = self.cfg.resume_from_step
            if body is not None and batch.batch_id in self._inherited and resume is not None:
                # an earlier process's batch, without the steps this restart logs again
                body, points = kept_up_to(body, points, batch.kind, resume)
            if body is not None:
                try:
                    self._post(body, batch.kind)
                except RetryableError as exc:
                    self._note_failure(exc)
                    return
                except RejectedError as exc:
                    self._dead_letter(body, points, exc, batch.kind)
                else:
                    self.counters.add(batch.kind, "replayed", points)
            self.spool.remove(batch, batch.size)
            self._backlog.popleft()
            if time.monotonic() >= until:
                return

    def _dead_letter(
        self, body: bytes, points: int, exc: RejectedError, kind: str = POINTS
    ) -> None:
        try:
            path = self.spool.dead_letter(body, str(exc))
        except (SpoolError, OSError) as write_error:
            self._drops.dead_lettered(kind, points, exc, self.spool.dir, write_error)
            return
        self._drops.dead_lettered(kind, points, exc, path)

    def _note_failure(self, exc: RetryableError) -> None:
        self._failures += 1
        delay = backoff_s(self._failures, self.cfg, exc.retry_after_s, random.random)
        self._retry_at = time.monotonic() + delay
        self.counters.last_error = str(exc)
        self._warnings.warn_once(
            f"retry:{exc.status}",
            f"rlguard: {self._failure_cause(exc)}; "
            f"spooling to {self.spool.dir} and retrying with backoff",
        )

    def _failure_cause(self, exc: RetryableError) -> str:
        """What is wrong, and for a refused token what to do (the batches wait in the spool)."""
        if exc.status == 401:
            return (
                f"the service does not accept this run's token ({exc}); set RLGUARD_TOKEN (or "
                "init(token=...)) to a token an admin made with `rlguard token create --name "
                "trainer --scope write`"
            )
        if exc.status == 403:
            return (
                f"this run's token cannot write to project {self.cfg.project!r} ({exc}); a "
                "trainer needs a token with the write scope (of this project, or of every "
                "project): an admin makes one with `rlguard token create --name trainer "
                "--scope write`"
            )
        state = "unreachable" if exc.retry_after_s is None else "busy"
        return f"the service is {state} ({exc})"

    def _note_success(self) -> None:
        self._last_contact = time.monotonic()
        if self._failures:
            logger.info("rlguard: the service at %s answers again", self.cfg.url)
        self._failures = 0
        self._retry_at = 0.0

    def _heartbeat_if_due(self) -> None:
        """Heartbeat every heartbeat_interval_s, and at once when new drops are to be told."""
        now = time.monotonic()
        if not self._run_created or now < self._retry_at:
            return
        drops = self._drops.current()
        if now < self._next_heartbeat and drops == self._drops.reported:
            return
        self._next_heartbeat = now + self.cfg.heartbeat_interval_s
        try:
            self._transport.heartbeat(self.cfg.run_id, self._drops.body(drops))
        except RetryableError as exc:  # the service is away: back off, tell it later
            self._note_failure(exc)
            return
        except RejectedError as exc:
            logger.debug("rlguard: heartbeat refused: %s", exc)
        self._drops.reported = drops

    def _poll_commands_if_due(self) -> None:
        """Ask for commands when no batch has brought them for ``command_poll_s``."""
        now = time.monotonic()
        if not self._run_created or now < self._retry_at:
            return
        if now - self._last_contact < self.cfg.command_poll_s:
            return
        self._last_contact = now
        try:
            answer = self._transport.pending_commands(self.cfg.run_id)
        except RetryableError as exc:
            self._note_failure(exc)
            return
        except RejectedError as exc:  # an older service without commands, or a read refused
            logger.debug("rlguard: command poll refused: %s", exc)
            return
        self._receive_commands((answer or {}).get("data", []))

    def _receive_commands(self, commands: list[dict[str, Any]]) -> None:
        """Hand each new command to the run once, and tell the service it arrived."""
        for command in commands:
            command_id = command.get("id")
            if not isinstance(command_id, int):
                continue
            if command_id not in self._commands_seen:
                self._commands_seen.add(command_id)
                self._on_command(command)
            self._command_reports.put((command_id, None, False))

    def _send_command_reports(self) -> None:
        """PATCH the reports queued so far; those the service could not take wait for later."""
        while not self._command_reports.empty():
            self._unsent_reports.append(self._command_reports.get())
        if not self._unsent_reports or time.monotonic() < self._retry_at:
            return
        waiting, self._unsent_reports = self._unsent_reports, []
        for index, (command_id, step, acted) in enumerate(waiting):
            body: dict[str, Any] = {"delivered": True, "acted": acted}
            if acted and step is not None:
                body["step"] = step
            try:
                self._transport.report_command(self.cfg.run_id, command_id, body)
            except RetryableError as exc:
                self._note_failure(exc)
                self._unsent_reports = waiting[index:]
                return
            except RejectedError as exc:
                logger.debug("rlguard: command report refused: %s", exc)

    def _shutdown(self) -> None:
        """After the stop sentinel: replay what time allows, then deliver the final status."""
        while self._backlog and time.monotonic() < self._close_deadline:
            if time.monotonic() < self._retry_at:
                self._wake.clear()
                self._wake.wait(min(self._retry_at, self._close_deadline) - time.monotonic())
            self._replay(self._close_deadline)
        final = self._final or {"status": "finished", "summary": {}}
        if not self._backlog:
            try:
                self._ensure_run()
                self._send_command_reports()
                if self._drops.untold():
                    drops = self._drops.current()
                    self._transport.heartbeat(self.cfg.run_id, self._drops.body(drops))
                self._transport.update_run(self.cfg.run_id, final)
                self.spool.remove_json("final.json")
                return
            except TransportError as exc:
                self.counters.last_error = str(exc)
        self.spool.write_json("final.json", final)
        self._write_run_json()

    def _write_run_json(self) -> None:
        """Once: what ``rlguard sync`` needs to create the run and deliver its spool."""
        if not self._run_json_written:
            payload = {**self._run_payload, "resume_from_step": None, "url": self.cfg.url}
            self.spool.write_json("run.json", payload)
            self._run_json_written = True


def _entries_before_stop(queued: list[Any], markers: list[FlushMarker]) -> tuple[list[Any], bool]:
    """The ``log()`` entries queued before the stop sentinel, and whether it was reached; the
    flush markers go to ``markers``."""
    if not has_markers(queued):  # the usual drain, told in one C-level pass
        return queued, False
    entries = []
    for item in queued:
        if type(item) is tuple:
            entries.append(item)
        elif item is STOP:
            return entries, True
        else:
            markers.append(item)
    return entries, False


def backoff_s(
    failures: int, cfg: HookConfig, retry_after_s: float | None, draw: Callable[[], float]
) -> float:
    """Seconds to wait after ``failures`` failures in a row: min(base·2^(n-1), cap) × U(0.5, 1)
    (``draw`` gives U(0, 1)), and at least a ``Retry-After`` the service sent, × U(1, 1.5)."""
    delay = min(cfg.backoff_base_s * 2 ** (failures - 1), cfg.backoff_cap_s)
    delay *= 0.5 + draw() / 2
    if retry_after_s is not None:  # the service said how long: at least that, spread out
        delay = max(delay, retry_after_s * (1 + draw() / 2))
    return delay

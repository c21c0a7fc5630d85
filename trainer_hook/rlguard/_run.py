"""Run: the handle ``rlguard.init()`` returns; ``log()`` is the only code on the training path."""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

from rlguard import _samples, _wire
from rlguard._config import SEVERITIES, HookConfig
from rlguard._sender import Sender
from rlguard._spool import SAMPLES
from rlguard.protocol import run_page_url

logger = logging.getLogger("rlguard")
_now = time.time


@dataclasses.dataclass(frozen=True)
class RunStatus:
    """Counters of a run's points and samples; once the queue is drained ``logged == sent +
    replayed + dead_lettered + dropped + spool_points``, and the same for the ``samples_*``
    counters with ``spool_samples`` (``samples_filtered``: left out by the per-step budget;
    ``sample_signal_points``: the points of ``logged`` the hook read from the samples)."""

    logged: int
    skipped: int
    sent: int
    spooled: int
    replayed: int
    dropped: int
    dropped_steps: int
    dead_lettered: int
    queued_steps: int
    spool_batches: int
    spool_points: int
    last_error: str | None
    samples_logged: int = 0
    samples_filtered: int = 0
    samples_sent: int = 0
    samples_replayed: int = 0
    samples_dropped: int = 0
    samples_dead_lettered: int = 0
    spool_samples: int = 0
    queued_bytes: int = 0
    sample_signal_points: int = 0


def _coerce_step(step: object) -> object:
    """numpy/torch integers become int; anything else is left for the sender to reject."""
    valid = _wire.to_step(step)
    return step if valid is None else valid


class _ClosedQueue:
    """Stands in for the queue of a finished run: log() after finish() warns once."""

    warned = False

    def append(self, item: object) -> None:
        """Drop ``item``; warn the first time."""
        if not self.warned:
            self.warned = True
            logger.warning("rlguard: log() after finish() is ignored")

    def append_locked(self, item: object) -> None:
        """Drop a system sampler's entry, as ``append``."""
        self.append(item)

    def append_samples(self, item: object, count: int, size: int) -> None:
        """Drop a log_samples() call, as ``append``."""
        self.append(item)


class Run:
    """One monitored run.

    >>> run = rlguard.init(project="grpo-math", config={"clip_ratio_low": 0.2})  # doctest: +SKIP
    >>> run.log({"actor/ppo_kl": 0.003, "actor/entropy": 0.52}, step=1)          # doctest: +SKIP
    >>> run.finish()                                                               # doctest: +SKIP
    """

    def __init__(self, cfg: HookConfig, active: bool) -> None:
        self.id = cfg.run_id
        self.project = cfg.project
        self.name = cfg.name
        self.config = dict(cfg.config)
        self.url = run_page_url(cfg.url, cfg.run_id)
        self.active = active
        self.alerts: list[dict[str, Any]] = []
        self._cfg = cfg
        self._next_step = 0
        self._finished = False
        self._finish_lock = threading.Lock()
        self._sampler: Any = None
        self._sender: Sender | None = None
        self._queue: Any = None
        self._samples_warned = False
        self._sample_calls = 0
        self._stop_alert: dict[str, Any] | None = None  # an alert or a stop command
        self._checkpoint_alert: dict[str, Any] | None = None  # … or a checkpoint command
        if active:
            payload = {
                "id": cfg.run_id,
                "project": cfg.project,
                "name": cfg.name,
                "config": self.config,
                "tags": list(cfg.tags),
                "resume_from_step": cfg.resume_from_step,
            }
            self._sender = Sender(cfg, payload, self._receive_alert, self._receive_command)
            self._queue = self._sender.queue

    def __repr__(self) -> str:
        state = "finished" if self._finished else ("active" if self.active else "inactive")
        return f"<Run {self.id!r} project={self.project!r} {state}>"

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.finish()
        else:
            self.finish(status="failed", summary={"error": f"{exc_type.__name__}: {exc}"})

    def start(self) -> None:
        """Start the sender thread (and the system sampler); ``init()`` calls this."""
        if self._sender is None:
            return
        self._sender.start()
        if not self._cfg.quiet:
            # Written, not logged: logging's default shows no INFO, and this line is for the
            # person who started the run (RLGUARD_QUIET=1 leaves it out).
            sys.stderr.write(self.location_line() + "\n")
        if self._cfg.gpu:
            from rlguard._gpu import SystemSampler

            self._sampler = SystemSampler(self._log_system, self._cfg.gpu_interval_s)
            self._sampler.start()

    def location_line(self) -> str:
        """The line ``init()`` prints: the run's name, id, project and page."""
        label = f"{self.name!r} ({self.id})" if self.name else self.id
        return f"rlguard: run {label} of project {self.project!r}: {self.url}"

    def log(
        self,
        metrics: Mapping[str, Any],
        step: Any = None,
        samples: Iterable[Mapping[str, Any]] | None = None,
    ) -> None:
        """Queue ``metrics`` for ``step`` (default: the previous step + 1), and ``samples`` as
        ``log_samples`` does at the same step. No I/O, never blocks."""
        queue = self._queue
        if queue is None:
            return
        if step is None:
            step = self._next_step
        elif type(step) is not int:
            step = _coerce_step(step)
        try:
            snapshot = metrics.copy()  # type: ignore[attr-defined]
        except AttributeError:
            snapshot = dict(metrics)
        queue.append((step, _now(), snapshot))
        if type(step) is int:
            self._next_step = step + 1
        if samples is not None:
            self.log_samples(samples, step)

    def log_samples(
        self, samples: Iterable[Mapping[str, Any]], step: Any = None, split: str = "train"
    ) -> None:
        """Queue rollout samples for ``step`` (default: the step of the last ``log()``);
        ``split`` names another set than the training rollouts, e.g. ``"validation"``.

        Each sample is a dict: text (``prompt``, ``response``, ``reference``, ``ground_truth``),
        numbers (``reward`` and components such as ``reward_format``, ``advantage``, ``length``,
        ``truncated``, ``group``, ``logprob``, ``entropy``, ``kl``) and per-token arrays
        (``tokens``, ``token_logprobs``, ``token_entropy``, ``token_kl``, ``token_ratio``).
        No I/O, never raises; budgets and the sampling policy apply in the sender thread.

        Each record (the dict) is copied here, so the caller may reuse or change it; the
        values in it are read later by the sender thread: strings and numbers are safe, but
        do not change a list, array or tensor in place after the call (a fresh one per step,
        as trainers produce them, is fine; else pass a copy).
        """
        queue = self._queue
        if queue is None:
            return
        if step is None:
            step = max(self._next_step - 1, 0)
        elif type(step) is not int:
            step = _coerce_step(step)
        self._sample_calls += 1
        try:
            records, size = _samples.snapshot(samples, self._sample_calls)
        except Exception as exc:  # a user object that cannot be iterated or read: warn, go on
            self._warn_samples_once(exc)
            return
        queue.append_samples((step, _now(), records, split), len(records), size)

    def _warn_samples_once(self, exc: Exception) -> None:
        if not self._samples_warned:
            self._samples_warned = True
            logger.warning("rlguard: log_samples() takes a list of dicts (%r); ignored", exc)

    def _log_system(self, values: dict[str, float]) -> None:
        """System metrics, stamped with the current training step without advancing it."""
        queue = self._queue
        if queue is not None:
            queue.append_locked((max(self._next_step - 1, 0), _now(), values))

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until everything logged so far is sent or safely spooled; False on timeout."""
        if self._sender is None or self._finished:
            return True
        return self._sender.flush(self._cfg.finish_timeout_s if timeout_s is None else timeout_s)

    def finish(
        self,
        status: str = "finished",
        summary: Mapping[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> RunStatus:
        """Deliver what is left within ``timeout_s``, set the run's status, report the rest."""
        with self._finish_lock:
            if self._finished or self._sender is None:
                self._finished = True
                return self.status()
            self._finished = True
        from rlguard import _registry

        _registry.forget(self)
        status, summary = self._stopped(status, summary)
        if self._sampler is not None:
            self._sampler.stop()
        self._queue = _ClosedQueue()
        timeout = self._cfg.finish_timeout_s if timeout_s is None else timeout_s
        done = self._sender.close(status, dict(summary or {}), timeout)
        result = self.status()
        if result.spool_batches or not done:
            logger.warning(
                "rlguard: run %s finished with %d point(s) in %d batch(es) still in %s%s; the next "
                "process of this run or `rlguard sync --spool-dir %s` will deliver them",
                self.id,
                result.spool_points,
                result.spool_batches,
                self._sender.spool.dir,
                "" if done else " (the sender did not stop in time)",
                self._cfg.spool_dir,
            )
        return result

    def status(self) -> RunStatus:
        """Counters of what happened to the points logged so far."""
        if self._sender is None:
            return RunStatus(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, None)
        counters = self._sender.counters
        batches, points = self._sender.backlog_points()
        sample_batches, spool_samples = self._sender.backlog_points(SAMPLES)
        queue = self._sender.queue
        return RunStatus(
            logged=counters.logged,
            skipped=counters.skipped,
            sent=counters.sent,
            spooled=counters.spooled,
            replayed=counters.replayed,
            dropped=counters.dropped,
            dropped_steps=counters.dropped_steps + queue.dropped_steps,
            dead_lettered=counters.dead_lettered,
            queued_steps=len(queue),
            spool_batches=batches + sample_batches,
            spool_points=points,
            last_error=counters.last_error,
            samples_logged=counters.samples_logged,
            samples_filtered=counters.samples_filtered,
            samples_sent=counters.samples_sent,
            samples_replayed=counters.samples_replayed,
            samples_dropped=counters.samples_dropped + queue.dropped_samples,
            samples_dead_lettered=counters.samples_dead_lettered,
            spool_samples=spool_samples,
            queued_bytes=queue.bytes,
            sample_signal_points=counters.sample_signal_points,
        )

    @property
    def should_stop(self) -> bool:
        """True once a stop was asked (``rlguard stop``, the dashboard, ``POST …/stop``) or an
        alert at ``stop_on`` severity (or above) arrived: end training now."""
        return self._stop_alert is not None

    @property
    def stop_reason(self) -> dict[str, Any] | None:
        """What made ``should_stop`` true: the alert, or the command (``"kind": "stop"``,
        with ``requested_by`` and ``reason``)."""
        return self._stop_alert

    def checkpoint_request(self) -> dict[str, Any] | None:
        """What asks for a checkpoint now, once: an alert at ``checkpoint_on`` severity (or
        above), or a checkpoint command (``"kind": "checkpoint"``)."""
        request, self._checkpoint_alert = self._checkpoint_alert, None
        if request is not None and _is_command(request) and self._sender is not None:
            self._sender.report_command(request["id"], self._last_step())
        return request

    def _last_step(self) -> int | None:
        return self._next_step - 1 if self._next_step else None

    def _stopped(
        self, status: str, summary: Mapping[str, Any] | None
    ) -> tuple[str, Mapping[str, Any] | None]:
        """A run that ends normally after a stop request ends ``stopped``, saying by what; so
        does one a stop command ended with an exception (W&B's stop interrupts the loop)."""
        reason = self._stop_alert
        ended_by_command = reason is not None and _is_command(reason) and status == "failed"
        if reason is None or (status != "finished" and not ended_by_command):
            return status, summary
        if _is_command(reason):
            if self._sender is not None:
                self._sender.report_command(reason["id"], self._last_step())
            stopped_by = {"command": reason["id"], "requested_by": reason.get("requested_by")}
        else:
            stopped_by = {"alert": reason.get("id"), "detector": reason.get("detector")}
        return "stopped", {"stopped_by": stopped_by, **(summary or {})}

    def _apply_policies(self, alert: dict[str, Any]) -> None:
        if alert.get("status", "open") != "open":
            return
        if _reaches(alert, self._cfg.checkpoint_on):
            self._checkpoint_alert = alert
            logger.warning("rlguard: checkpoint requested by %s", _describe(alert))
        if _reaches(alert, self._cfg.stop_on) and self._stop_alert is None:
            self._stop_alert = alert
            logger.warning("rlguard: stop requested by %s", _describe(alert))

    def _receive_command(self, command: dict[str, Any]) -> None:
        """Called by the sender thread for each stop or checkpoint command it receives."""
        kind = command.get("kind")
        if kind == "stop" and self._stop_alert is None:
            self._stop_alert = command
        elif kind == "checkpoint":
            self._checkpoint_alert = command
        else:
            return
        logger.warning("rlguard: %s requested by %s", kind, _describe_command(command))
        callback = self._cfg.on_command
        if callback is None:
            return
        try:
            callback(command)
        except Exception:  # the caller's callback must not stop delivery
            logger.exception("rlguard: the on_command callback raised for %s", command.get("id"))

    def _receive_alert(self, alert: dict[str, Any]) -> None:
        """Called by the sender thread for each alert a batch acknowledgement carries (opened
        or escalated): one log line each, WARNING for warn and critical, so a terminal shows it."""
        self.alerts.append(alert)
        level = logging.INFO if alert.get("severity") == "info" else logging.WARNING
        logger.log(level, "rlguard: run %s: %s", self.id, _describe(alert))
        self._apply_policies(alert)
        callback = self._cfg.on_alert
        if callback is None:
            return
        try:
            callback(alert)
        except Exception:  # the user's callback must not stop delivery
            logger.exception("rlguard: the on_alert callback raised for alert %s", alert.get("id"))


def _reaches(alert: dict[str, Any], threshold: str | None) -> bool:
    severity = alert.get("severity")
    return (
        threshold is not None
        and severity in SEVERITIES
        and (SEVERITIES.index(severity) >= SEVERITIES.index(threshold))
    )


def _is_command(request: dict[str, Any]) -> bool:
    return request.get("kind") in ("stop", "checkpoint")


def _describe_command(command: dict[str, Any]) -> str:
    why = f": {command['reason']}" if command.get("reason") else ""
    return f"{command.get('requested_by')} (command {command.get('id')}){why}"


def _describe(alert: dict[str, Any]) -> str:
    return (
        f"{alert.get('severity', '?').upper()} alert {alert.get('id')} "
        f"({alert.get('detector')}/{alert.get('key')}, step {alert.get('last_step')}): "
        f"{alert.get('message', '')}"
    )

"""The two public RL-health tools, run on the public-log cases at their defaults.

- ``rlwatch`` (PyPI, MIT): an ``RLWatch`` monitor with its default config (storage in a
  temporary folder, no alert channel but its console panel, which goes to stderr and is
  dropped here), fed every step through its veRL tracker's key map; the alerts are what its
  store kept (after its own cooldown). Its TRL callback maps the same fields its detectors read
  (entropy, kl, reward, reward_std, loss, grad_norm) from these logs' TRL keys, so one map serves
  both and the benchmark need not import transformers. Its veRL map expects names these verl
  logs do not print, so ``rlwatch_verl_keys`` runs it again with verl's names filling the
  fields its map left empty (``VERL_NAMES_FOR_RLWATCH``).
- ``rldoctor`` (PyPI, Apache-2.0): ``LiveMonitor`` at its defaults (first check after 60
  logged steps, then every 25) gives the first step it would have flagged live; ``diagnose``
  over the whole log gives its post-hoc verdict, which decides detected or not (it is a
  post-hoc tool first). Post-hoc findings carry no step.

A tool that is not installed is left out (``available()``); both are in the ``dev`` extra.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

Records = list[tuple[int, dict[str, Any]]]
PeerRun = Callable[[Mapping[str, Any], Records], dict[str, Any]]
RLWATCH_SEVERITY = {"warning": "warn", "critical": "critical"}
# rlwatch's veRL map expects names (actor/entropy, rewards/mean, training/grad_norm) that these
# verl logs do not print; ``rlwatch_verl_keys`` fills each field its map left empty from the
# first of these verl names present: what a user would pass to ``log_step`` by hand.
VERL_NAMES_FOR_RLWATCH = {
    "entropy": ("actor/entropy", "actor/entropy_loss"),
    "kl_divergence": ("actor/kl_loss", "actor/reward_kl_penalty", "critic/kl"),
    "reward_mean": ("critic/score/mean",),
    "loss": ("actor/pg_loss",),
    "grad_norm": ("actor/grad_norm",),
}
RL_DOCTOR_SEVERITY = {"INFO": "info", "WARNING": "warn", "CRITICAL": "critical"}


def versions() -> dict[str, str | None]:
    """The installed version of each peer (None when absent)."""
    found: dict[str, str | None] = {}
    for dist in ("rlwatch", "rldoctor"):
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = None
    return found


def available() -> dict[str, PeerRun]:
    """The peers installed here, by the name the benchmark's JSON uses."""
    have = versions()
    runs: dict[str, PeerRun] = {}
    if have["rlwatch"]:
        runs["rlwatch"] = run_rlwatch
        runs["rlwatch_verl_keys"] = run_rlwatch_verl_keys
    if have["rldoctor"]:
        runs["rl_doctor"] = run_rl_doctor
    return runs


def run_rlwatch(case: Mapping[str, Any], records: Records) -> dict[str, Any]:
    """Every step through an rlwatch monitor at its defaults, keys mapped by rlwatch."""
    from rlwatch.integrations.verl_tracking import _map_metrics

    return _rlwatch_monitor(case, [(step, _map_metrics(values)) for step, values in records])


def run_rlwatch_verl_keys(case: Mapping[str, Any], records: Records) -> dict[str, Any]:
    """The same, with verl's own metric names filling the fields rlwatch's map left empty."""
    from rlwatch.integrations.verl_tracking import _map_metrics

    fed = []
    for step, values in records:
        metrics = _map_metrics(values)
        for field, names in VERL_NAMES_FOR_RLWATCH.items():
            found = [values[name] for name in names if name in values]
            if field not in metrics and found:
                metrics[field] = float(found[0])
        fed.append((step, metrics))
    return _rlwatch_monitor(case, fed)


def _rlwatch_monitor(case: Mapping[str, Any], steps: Records) -> dict[str, Any]:
    """An rlwatch monitor at its default config fed these steps; the alerts its store kept."""
    from rlwatch.config import RLWatchConfig
    from rlwatch.core import RLWatch

    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stderr(io.StringIO()):
        config = RLWatchConfig(run_id=case["name"])
        config.storage.log_dir = folder
        monitor = RLWatch(config)
        monitor.start()
        fed = 0
        for step, metrics in steps:
            if metrics:
                monitor.log_step(step, **metrics)
                fed += 1
        kept = monitor.store.get_alerts(config.run_id)
        monitor.stop()
    alerts = [
        {
            "detector": alert["detector"],
            "severity": RLWATCH_SEVERITY.get(alert["severity"], alert["severity"]),
            "first_step": alert["step"],
            "message": alert["message"],
        }
        for alert in kept
    ]
    return {"steps_fed": fed, "alerts": sorted(alerts, key=lambda a: a["first_step"])}


def run_rl_doctor(case: Mapping[str, Any], records: Records) -> dict[str, Any]:
    """rl-doctor's post-hoc diagnosis of the whole log, and its live monitor's first finding."""
    from rl_doctor import diagnose, run_from_records
    from rl_doctor.detectors import Severity
    from rl_doctor.live import LiveMonitor

    rows = [{**values, "step": step} for step, values in records]
    if not rows:
        return {"alerts": [], "first_live_finding_step": None, "skipped_checks": ["all"]}
    live = LiveMonitor(on_finding=lambda finding: None, name=case["name"])
    live_first = None
    for step, values in records:
        if live.log(values, step=step) and live_first is None:
            live_first = step
    diagnosis = diagnose(run_from_records(rows, name=case["name"]))
    alerts = [
        {
            "detector": finding.detector,
            "severity": RL_DOCTOR_SEVERITY[finding.severity.name],
            "first_step": None,
            "message": finding.summary,
        }
        for finding in diagnosis.findings
        if finding.severity >= Severity.INFO
    ]
    skipped = sorted(f.detector for f in diagnosis.findings if f.severity == Severity.SKIPPED)
    return {"alerts": alerts, "first_live_finding_step": live_first, "skipped_checks": skipped}

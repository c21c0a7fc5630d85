"""Stability detectors of DETECTORS.md as pure, resumable streaming code.

Each alert key is one Rule, declared in its detector's module; RULES finds it by its key and
DETECTOR_TYPES lists the detectors (their ids and rules) in the order they run.
"""

from rlguard_backend.stability.events import Action, AlertEvent, Severity
from rlguard_backend.stability.rules import Rule
from rlguard_backend.stability.suite import DETECTOR_TYPES, RULES, DetectorSuite
from rlguard_backend.stability.thresholds import DEFAULTS

__all__ = [
    "DEFAULTS",
    "DETECTOR_TYPES",
    "RULES",
    "Action",
    "AlertEvent",
    "DetectorSuite",
    "Rule",
    "Severity",
]

"""Stability detectors D1-D8 of DETECTORS.md as pure, resumable streaming code.

Each alert key is one Rule (rules.py), declared in its detector's module and listed in RULES.

Detector ids and their alert keys:

====================  ======================================================================
``nonfinite``         ``nonfinite``, ``pinned_at_clamp``, ``negative_kl``, ``truncated_at_floor``
``entropy_collapse``  ``entropy_collapse``, ``entropy_exhausted``, ``entropy_blowup``
``no_learning_signal``  ``no_learning_signal`` (INFO when the reward is saturated, else WARN)
``entropy_cov_leading``  ``entropy_cov_leading`` (optional covariance probe)
``kl_runaway``        ``kl_runaway``, ``kl_penalty_ineffective``
``kl_spike``          ``kl_spike``, ``grad_spike``, ``logprob_mismatch``
``kl_penalty``        ``kl_penalty_strong``, ``kl_binding``
``clipfrac``          ``clipfrac``, ``clip_inactive``, ``dual_clip``, ``clip_asymmetry``
``kl_controller``     ``kl_controller``, ``kl_controller_units``, ``kl_controller_replay``
``length``            ``length_blowup``, ``length_collapse``, ``entropy_length_rise``
``sample_quality``    ``degenerate_responses``, ``repetition_loops``, ``entropy_gibberish``,
                      ``length_loops`` (docs/detectors-samples.md)
====================  ======================================================================
"""

from rlguard_backend.stability.events import Action, AlertEvent, Severity
from rlguard_backend.stability.lifecycle import latest_updates
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
    "latest_updates",
]

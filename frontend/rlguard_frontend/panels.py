"""The panel registry: which signals form each stability panel, its units and guide lines.

Panels are data; one callback draws them all. A metric key belongs to the first panel that
claims its canonical signal (from ``GET /runs/{id}/keys``) or matches its ``key_pattern``;
every other key is listed under the panels (``k0, k1 …``) and drawn when picked.

>>> keys = [{"name": "actor/entropy", "signal": "entropy"}, {"name": "x", "signal": None}]
>>> plan = plan_panels(keys)
>>> plan["panels"]["entropy"]["keys"], plan["minis"]
(['actor/entropy'], {'k0': 'x'})
>>> plan["signals"]
{'actor/entropy': 'entropy'}
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Panel:
    """One stability panel: what it draws (signals or a key pattern) and how to read it."""

    id: str
    title: str
    unit: str
    signals: tuple[str, ...] = ()
    key_pattern: str | None = None
    right: tuple[str, ...] = ()  # signals drawn against the right-hand axis
    right_unit: str = ""
    detectors: tuple[str, ...] = ()  # alert detectors that concern this panel
    guides: tuple[str, ...] = ()  # "kl_target", "kl_target_right", "entropy_start", "entropy_half"
    hint: str = ""

    def claims(self, name: str, signal: str | None) -> bool:
        """Whether a key (by name and canonical signal) belongs on this panel."""
        if signal is not None and (signal in self.signals or signal in self.right):
            return True
        return self.key_pattern is not None and re.search(self.key_pattern, name) is not None


PANELS: tuple[Panel, ...] = (
    Panel(
        "kl",
        "KL",
        "nats/token",
        signals=("ppo_kl", "kl_loss", "reward_kl_penalty"),
        detectors=("kl_runaway", "kl_spike", "kl_penalty"),
        guides=("kl_target",),
        hint="ppo_kl: policy vs behaviour per update; kl_loss / reward_kl_penalty: vs reference",
    ),
    Panel(
        "kl_controller",
        "KL controller",
        "β (coefficient)",
        signals=("reward_kl_coef", "kl_coef"),
        right=("kl_ref_seq",),
        right_unit="KL vs target",
        detectors=("kl_controller",),
        guides=("kl_target_right",),
        hint="β of the in-reward KL beside the KL it controls and the controller's target",
    ),
    Panel(
        "clip",
        "Clip fraction",
        "fraction of tokens",
        signals=("clipfrac", "clipfrac_low", "clipfrac_high", "clipfrac_dual"),
        detectors=("clipfrac",),
        hint="clipfrac_dual is the dual-clip side (A<0, ratio > c), not the lower ε side",
    ),
    Panel(
        "entropy",
        "Entropy",
        "nats/token",
        signals=("entropy",),
        right=("cov_logp_adv",),
        right_unit="cov(log p, A)",
        detectors=("entropy_collapse", "entropy_cov_leading"),
        guides=("entropy_start", "entropy_half"),
        hint="dotted: the run's starting level and 50 % of it",
    ),
    Panel(
        "reward",
        "Reward & response length",
        "reward",
        signals=("reward_mean", "reward_std"),
        right=("response_length",),
        right_unit="tokens",
        detectors=("length",),
    ),
    Panel(
        "groups",
        "Truncation & zero-std groups",
        "fraction",
        signals=("response_clip_ratio", "frac_zero_std"),
        detectors=("length",),
        hint="responses cut at max length; GRPO groups with no reward spread (no signal)",
    ),
    Panel("grad_norm", "Gradient norm", "norm (pre-clip)", signals=("grad_norm",)),
    Panel(
        "gpu",
        "GPU",
        "utilisation %",
        key_pattern=r"^system/gpu\d+/utilization$",
        hint="per device; memory, power and temperature are in the grid below",
    ),
    Panel(
        "gpu_memory",
        "GPU memory & power",
        "GiB / W",
        key_pattern=r"^system/gpu\d+/(memory_used_gb|power_w|temperature_c)$",
    ),
    Panel(
        "host",
        "Host",
        "% / GiB",
        key_pattern=r"^system/(cpu_percent|memory_percent|memory_used_gb|process_rss_gb)$",
    ),
)
PANELS_BY_ID: dict[str, Panel] = {panel.id: panel for panel in PANELS}

# The KL a controller drives is the in-reward penalty; the right axis of that panel shows it.
CONTROLLED_KL_SIGNALS = ("reward_kl_penalty", "kl_ref_seq")
KL_TARGET_CONFIG_KEYS = ("kl_target", "algorithm.kl_ctrl.target_kl", "target_kl", "target")


def panel_for_key(name: str, signal: str | None) -> Panel | None:
    """The first panel that claims the key, or None (it joins the other keys' list)."""
    return next((panel for panel in PANELS if panel.claims(name, signal)), None)


def plan_panels(keys: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Assign a run's keys to panels; the rest are the other keys ``k0, k1 …`` (JSON-able)."""
    panels: dict[str, dict[str, list[str]]] = {}
    minis: dict[str, str] = {}
    signals: dict[str, str] = {}
    for key in sorted(keys, key=lambda k: str(k["name"])):
        name, signal = str(key["name"]), key.get("signal")
        if signal:
            signals[name] = str(signal)
        panel = panel_for_key(name, signal)
        if panel is None:
            minis[f"k{len(minis)}"] = name
            continue
        entry = panels.setdefault(panel.id, {"keys": [], "right": []})
        entry["right" if signal in panel.right else "keys"].append(name)
        if panel.id == "kl" and signal in CONTROLLED_KL_SIGNALS:
            panels.setdefault("kl_controller", {"keys": [], "right": []})["right"].append(name)
    if not panels.get("kl_controller", {}).get("keys"):
        panels.pop("kl_controller", None)  # without β there is no controller to show
    return {"panels": panels, "minis": minis, "signals": signals}


def kl_target(config: Mapping[str, Any]) -> float | None:
    """The adaptive KL controller's target from a run config (flat or dotted verl path)."""
    for path in KL_TARGET_CONFIG_KEYS:
        node: Any = config
        for part in [path] if path in config else path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, int | float) and not isinstance(node, bool):
            return float(node)
    return None


def panels_for_alert(
    detector: str, evidence: Mapping[str, Any], plan: Mapping[str, Any]
) -> list[str]:
    """Panel ids (or other keys' ``k<n>``) an alert concerns; NaN alerts follow the key they
    name."""
    concerned = [panel.id for panel in PANELS if detector in panel.detectors]
    if detector != "nonfinite":
        return concerned
    # D1 names the offending keys in evidence["fields"] ({key: value}); older alerts used "key".
    fields = evidence.get("fields")
    keys = set(fields) if isinstance(fields, Mapping) else {evidence.get("key")}
    for panel_id, entry in plan.get("panels", {}).items():
        if keys & {*entry["keys"], *entry["right"]}:
            concerned.append(panel_id)
    concerned += [mini for mini, name in plan.get("minis", {}).items() if name in keys]
    return concerned


def all_keys(plan: Mapping[str, Any]) -> list[str]:
    """Every key the plan draws, each once."""
    names: list[str] = []
    for entry in plan.get("panels", {}).values():
        names += [n for n in entry["keys"] + entry["right"] if n not in names]
    return names + [n for n in plan.get("minis", {}).values() if n not in names]

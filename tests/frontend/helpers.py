"""Seeding runs over HTTP and reading Plotly state from the page, for the browser tests."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx

WAIT_MS = 20_000


def graph_selector(panel: str) -> str:
    """CSS selector of a run-page graph (Dash renders dict ids as sorted JSON)."""
    element_id = json.dumps({"panel": panel, "type": "run-panel-graph"}, separators=(",", ":"))
    return f"[id='{element_id}'] .js-plotly-plot"


def seed_run(
    base_url: str,
    run_id: str,
    *,
    steps: int = 300,
    name: str = "grpo-demo",
    extra_keys: dict[str, float] | None = None,
    config: dict[str, Any] | None = None,
) -> None:
    """A run with verl-style KL, clip, entropy and reward keys over ``steps`` steps."""
    with httpx.Client(base_url=base_url, timeout=30) as http:
        body = {
            "id": run_id,
            "project": "browser",
            "name": name,
            "config": config or {"kl_target": 0.05},
        }
        http.post("/api/v1/runs", json=body).raise_for_status()
        rows = [
            {
                "step": s,
                "time": 1_700_000_000.0 + 2.0 * s,
                "values": {
                    "actor/entropy": 1.2 * math.exp(-s / 150),
                    "actor/ppo_kl": 0.002 + 0.001 * math.sin(s / 7),
                    "actor/pg_clipfrac": 0.05 + 0.02 * math.sin(s / 11),
                    "critic/score/mean": 0.2 + s / 600,
                    "response_length/mean": 300 + s / 2,
                    **(extra_keys or {}),
                },
            }
            for s in range(steps)
        ]
        for start in range(0, steps, 200):
            batch = {"batch_id": f"seed-{start}", "steps": rows[start : start + 200]}
            http.post(f"/api/v1/runs/{run_id}/batches", json=batch).raise_for_status()


def plot_state(page: Any, panel: str) -> dict[str, Any]:
    """Trace lengths, trace names, shapes and annotations of one drawn panel."""
    return page.eval_on_selector(
        graph_selector(panel),
        """el => ({
            lengths: el.data.map(t => (t.x || []).length),
            names: el.data.map(t => t.name),
            lastX: el.data.length ? el.data[0].x[el.data[0].x.length - 1] : null,
            shapes: (el.layout.shapes || []).length,
            annotations: (el.layout.annotations || []).map(a => a.text),
            customdata: el.data.flatMap(t => t.customdata || []),
        })""",
    )


def find_component(node: Any, element_id: str) -> Any:
    """The component with ``element_id`` in a layout tree, or None."""
    if getattr(node, "id", None) == element_id:
        return node
    children = getattr(node, "children", None)
    for child in children if isinstance(children, list) else [children]:
        if child is not None and not isinstance(child, str):
            found = find_component(child, element_id)
            if found is not None:
                return found
    return None

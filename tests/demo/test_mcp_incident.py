"""End to end: the demo's collapse run streams into a real service, and an agent's MCP client
(``rlguard mcp`` over stdio) asks ``incident`` about its entropy collapse."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from mcp import ClientSession

from tests.backend.mcp_clients import call, run_with
from tests.conftest import RunningServer
from tests.hook.hookutil import alert_lines

pytest.importorskip("torch")

# Seed 0 collapses at step 15 (the preset's window: by step 40, tests/demo/test_demo_alerts.py)
STEPS = 30
DEMO = [sys.executable, "-m", "rlguard", "demo", "--preset", "collapse", "--steps", str(STEPS)]
pytestmark = pytest.mark.timeout(1200)


def test_mcp_incident_on_the_demo_collapse_gives_onset_and_samples(server: RunningServer) -> None:
    command = [*DEMO, "--url", server.url, "--project", "mcp-demo", "--device", "cpu"]
    env = {**os.environ, "RLGUARD_GPU": "0"}
    trained = subprocess.run(command, capture_output=True, text=True, timeout=1100, env=env)
    assert trained.returncode == 0, trained.stderr[-2000:]

    async def scenario(session: ClientSession) -> None:
        runs = (await call(session, "list_runs", project="mcp-demo", health="critical")).data
        (run,) = runs["runs"]
        health = (await call(session, "run_health", run_id=run["id"])).data
        collapse = next(a for a in health["open_alerts"] if a["detector"] == "entropy_collapse")
        assert collapse["severity"] == "critical" and collapse["advice"]
        assert alert_lines(trained.stderr, run["id"], collapse) != []  # shown as it opened
        found = (await call(session, "incident", alert_id=collapse["id"])).data
        onset = found["onset_step"]
        assert onset == collapse["first_step"] and 1 < onset <= STEPS
        assert found["steps_since_onset"] == STEPS - onset
        before, after = found["samples"]["before"], found["samples"]["after"]
        assert (before["step"], after["step"]) == (onset - 1, onset)  # the demo samples each step
        for side in (before, after):
            rewards = [s["reward"] for s in side["samples"]]
            assert len(rewards) == 3 and rewards == sorted(rewards)
            assert all(s["prompt"].endswith("=") for s in side["samples"])
        assert "entropy" in [m["signal"] for m in found["moved_with_it"]]
        assert found["healthiest_sibling"] is None  # the only run of its project

    run_with("stdio", server.url, None, scenario)

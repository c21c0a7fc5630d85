"""`rlguard demo` streams a real GRPO run into a real service through the hook."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx

from tests.conftest import RunningServer

STEPS = 10  # validates at steps 1 and 10


def test_demo_cli_streams_preset_into_service(server: RunningServer) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlguard",
            "demo",
            "--preset",
            "healthy",
            "--steps",
            str(STEPS),
            "--url",
            server.url,
            "--project",
            "demo-test",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "RLGUARD_GPU": "0"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "healthy" in result.stdout
    with httpx.Client(base_url=server.url, timeout=30) as http:
        runs = http.get("/api/v1/runs", params={"project": "demo-test"}).json()
        assert runs["count"] == 1
        run = runs["data"][0]
        assert (run["status"], run["last_step"]) == ("finished", STEPS)  # steps count from 1
        assert run["config"]["kl_placement"] in ("loss", "reward", "none")
        keys = {k["name"]: k for k in http.get(f"/api/v1/runs/{run['id']}/keys").json()["data"]}
        samples = http.get(f"/api/v1/runs/{run['id']}/samples", params={"limit": 1}).json()
        worst = http.get(
            f"/api/v1/runs/{run['id']}/samples", params={"step": STEPS, "sort": "reward"}
        ).json()
    assert samples["count"] == STEPS * 64  # the default budget: 64 of the 16 x 8 responses
    assert samples["data"][0]["prompt"].endswith("=") and samples["data"][0]["step"] == 1
    assert worst["count"] == 64 and worst["data"][0]["reward"] <= worst["data"][-1]["reward"]
    for name in ("actor/entropy", "actor/ppo_kl", "actor/pg_clipfrac", "critic/score/mean"):
        assert (keys[name]["count"], keys[name]["first_step"]) == (STEPS, 1), name
    assert keys["actor/entropy"]["signal"] == "entropy"
    assert keys["actor/pg_clipfrac"]["signal"] == "clipfrac"

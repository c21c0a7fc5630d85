"""`rlguard.Api` against a real service: runs, paged full-resolution history, alerts, Parquet."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import rlguard
from rlguard.errors import RejectedError
from tests.hook.hookutil import ROOT, ServiceProcess, api, child_env


@pytest.fixture
def logged(service: ServiceProcess, run_id: str, spool_dir: Path) -> str:
    """A run of 250 steps: `loss` at every step, `rare` every 50th, an entropy that goes NaN."""
    run = rlguard.init(
        project="notebook", run_id=run_id, url=service.url, spool_dir=str(spool_dir), gpu=False
    )
    for step in range(250):
        values = {"loss": step / 10, "actor/entropy": math.nan if step == 200 else 1.0}
        if step % 50 == 0:
            values["rare"] = step
        run.log(values, step=step)
    assert run.finish(timeout_s=30).sent == 250 * 2 + 5
    return run_id


def test_read_api_history_pages_at_full_resolution(service: ServiceProcess, logged: str) -> None:
    with rlguard.Api(service.url) as client:
        frame = client.history(logged, ["loss", "rare", "never_logged"])
        paged = list(client.iter_history(logged, ["loss"], page_steps=64))
        by_time = client.history(logged, ["actor/entropy"], x="time")["actor/entropy"]
    assert list(frame.index[:3]) == [0, 1, 2] and len(frame) == 250
    assert list(frame.columns) == ["time", "loss", "rare", "never_logged"]
    assert frame["loss"][249] == 24.9
    assert frame["rare"].count() == 5 and math.isnan(frame["rare"][1])
    assert frame["never_logged"].isna().all()
    assert [row["step"] for row in paged] == list(range(250))
    assert str(by_time.index.dtype).startswith("datetime64") and len(by_time) == 250
    assert math.isnan(by_time.iloc[200]) and by_time.iloc[199] == 1.0


def test_read_api_runs_run_keys_and_alerts(service: ServiceProcess, logged: str) -> None:
    with rlguard.Api(service.url) as client:
        assert logged in {r["id"] for r in client.runs(project="notebook")}
        assert client.run(logged)["project"] == "notebook"
        assert {k["name"]: k["count"] for k in client.keys(logged)}["rare"] == 5
        alerts = client.alerts(run_id=logged)
        stored = api(service.url, "GET", f"/runs/{logged}/alerts")["data"]
        assert [a["id"] for a in alerts] == [a["id"] for a in stored]
        assert any(a["detector"] == "nonfinite" for a in alerts)
        with pytest.raises(RejectedError, match="404"):
            client.run("no-such-run")
        assert logged not in {r["id"] for r in client.runs(project="notebook", archived=True)}


def test_read_api_export_parquet(service: ServiceProcess, logged: str, tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    command = [sys.executable, "-m", "rlguard", "export", logged, "--url", service.url]
    result = subprocess.run(
        [*command, "--format", "parquet", "-o", str(out), "--keys", "loss,rare"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    frame = pd.read_parquet(out)
    assert list(frame.columns) == ["time", "loss", "rare"] and len(frame) == 250
    assert frame["loss"].iloc[10] == 1.0

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


def _export(service: ServiceProcess, run: str, *options: str) -> str:
    """``rlguard export RUN OPTIONS`` in a process of its own; its stdout."""
    command = [sys.executable, "-m", "rlguard", "export", run, "--url", service.url, *options]
    result = subprocess.run(
        command, env=child_env(), capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_read_api_export_parquet(service: ServiceProcess, logged: str, tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    _export(service, logged, "--format", "parquet", "-o", str(out), "--keys", "loss,rare")
    frame = pd.read_parquet(out)
    assert list(frame.columns) == ["time", "loss", "rare"] and len(frame) == 250
    assert frame["loss"].iloc[10] == 1.0


def _named_run(service: ServiceProcess, project: str, name: str, spool_dir: Path) -> str:
    run = rlguard.init(
        project=project, name=name, url=service.url, spool_dir=str(spool_dir), gpu=False
    )
    run.log({"loss": 1.5}, step=0)
    assert run.finish(timeout_s=30).sent == 1
    return run.id


def test_read_api_names_a_run_by_name_or_project_and_name(
    service: ServiceProcess, spool_dir: Path, run_id: str
) -> None:
    name = f"collapse-{run_id}"
    first = _named_run(service, "names-a", name, spool_dir)
    with rlguard.Api(service.url) as client:
        assert client.run(name)["id"] == first
        assert client.history(name)["loss"][0] == 1.5
        assert [a["run_id"] for a in client.alerts(run_id=name)] == []
        second = _named_run(service, "names-b", name, spool_dir)
        with pytest.raises(RejectedError, match=f"409.*2 runs are named '{name}'"):
            client.history(name)
        assert client.run(f"names-b/{name}")["id"] == second
        assert list(client.history(f"names-a/{name}")["loss"]) == [1.5]
        with pytest.raises(RejectedError, match="404") as missing:
            client.run(f"names-c/{name}")
    assert "create it first" not in str(missing.value)


def test_read_api_cli_export_takes_a_name(
    service: ServiceProcess, spool_dir: Path, run_id: str
) -> None:
    name = f"exported-{run_id}"
    _named_run(service, "names-cli", name, spool_dir)
    for ref in (name, f"names-cli/{name}"):
        assert _export(service, ref).splitlines() == ["step,loss", "0,1.5"]


def test_init_prints_the_run_page_unless_quiet(
    service: ServiceProcess, spool_dir: Path, run_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = rlguard.init(
        project="pages",
        name="seed0",
        run_id=run_id,
        url=service.url + "/",
        spool_dir=str(spool_dir),
        gpu=False,
    )
    run.finish(timeout_s=30)
    assert run.url == f"{service.url}/runs/{run_id}"
    line = f"rlguard: run 'seed0' ({run_id}) of project 'pages': {run.url}\n"
    assert capsys.readouterr().err == line
    quiet = rlguard.init(
        project="pages", url=service.url, spool_dir=str(spool_dir), gpu=False, quiet=True
    )
    quiet.finish(timeout_s=30)
    assert capsys.readouterr().err == ""

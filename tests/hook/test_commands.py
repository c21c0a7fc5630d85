"""Stop and checkpoint commands reach a trainer: in a batch reply, or by the idle poll."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import urllib.error
from pathlib import Path

import pytest

import rlguard
from tests.conftest import new_run_id
from tests.hook.hookutil import ServiceProcess, api, child_env, wait_for
from tests.hook.test_integrations import FAST, offline, tiny_model_dir

__all__ = ["offline"]  # the fixture, used by name below
MAX_STEPS = 60


def test_commands_stop_reaches_a_logging_loop_and_ends_the_run_stopped(
    service: ServiceProcess, run_id: str, spool_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rlguard")
    run = rlguard.init(
        project="commands", run_id=run_id, url=service.url, spool_dir=str(spool_dir), **FAST
    )
    run.log({"actor/entropy": 1.0}, step=0)
    assert run.flush(timeout_s=30) and not run.should_stop
    asked = api(service.url, "POST", f"/runs/{run_id}/stop", {"reason": "KL ran away"})
    step = 1
    while not run.should_stop:  # the loop goes on logging; the reply to a batch brings it
        run.log({"actor/entropy": 1.0}, step=step)
        assert run.flush(timeout_s=30)
        step += 1
        assert step < 200, "the stop never arrived"
    assert run.stop_reason is not None and run.stop_reason["id"] == asked["id"]
    assert run.stop_reason["reason"] == "KL ran away"
    assert f"stop requested by local (auth off) (command {asked['id']}): KL ran away" in caplog.text
    run.finish()
    stored = api(service.url, "GET", f"/runs/{run_id}")
    assert stored["status"] == "stopped"
    assert stored["summary"]["stopped_by"] == {
        "command": asked["id"],
        "requested_by": "local (auth off)",
    }
    [command] = api(service.url, "GET", f"/runs/{run_id}/commands")["data"]
    assert command["state"] == "acted" and command["acted_step"] == step - 1


def test_commands_checkpoint_reaches_an_idle_trainer_by_its_poll(
    service: ServiceProcess, run_id: str, spool_dir: Path
) -> None:
    run = rlguard.init(
        project="commands",
        run_id=run_id,
        url=service.url,
        spool_dir=str(spool_dir),
        command_poll_s=0.2,
        **FAST,
    )
    run.log({"actor/entropy": 1.0}, step=7)
    assert run.flush(timeout_s=30)
    asked = api(service.url, "POST", f"/runs/{run_id}/checkpoint", {"reason": "keep this one"})
    # nothing more is logged: only the poll can bring the command
    request = wait_for(run.checkpoint_request, 30, "the checkpoint command")
    assert (request["id"], request["kind"]) == (asked["id"], "checkpoint")
    assert run.checkpoint_request() is None  # once
    assert not run.should_stop

    def acted() -> bool:
        [command] = api(service.url, "GET", f"/runs/{run_id}/commands")["data"]
        return command["state"] == "acted" and command["acted_step"] == 7

    wait_for(acted, 30, "the checkpoint reported acted on")
    run.finish()
    assert api(service.url, "GET", f"/runs/{run_id}")["status"] == "finished"


def test_commands_reach_a_trainer_after_a_service_outage(
    tmp_path: Path, run_id: str, spool_dir: Path
) -> None:
    """A hook that lost the service backs off, replays, and polls for commands again."""
    db = tmp_path / "restart.db"
    first = ServiceProcess(db).start()
    port = int(first.url.rsplit(":", 1)[1])
    run = rlguard.init(
        project="commands",
        run_id=run_id,
        url=first.url,
        spool_dir=str(spool_dir),
        command_poll_s=0.2,
        backoff_cap_s=0.5,
        **FAST,
    )
    run.log({"actor/entropy": 1.0}, step=0)
    assert run.flush(timeout_s=30)
    first.kill()
    run.log({"actor/entropy": 0.9}, step=1)  # spooled while the service is away
    assert run.flush(timeout_s=30)
    second = ServiceProcess(db, port=port).start()
    try:
        asked = api(second.url, "POST", f"/runs/{run_id}/stop")
        wait_for(lambda: run.should_stop, 30, "the stop after the outage")
        assert run.stop_reason is not None and run.stop_reason["id"] == asked["id"]
        run.finish()
        assert api(second.url, "GET", f"/runs/{run_id}")["status"] == "stopped"
        series = api(second.url, "GET", f"/runs/{run_id}/series?keys=actor/entropy")
        assert series["series"]["actor/entropy"]["steps"] == [0, 1]
    finally:
        second.stop()


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlguard", *args, "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )


def test_commands_cli_asks_once_and_says_why_a_repeat_is_refused(
    service: ServiceProcess, run_id: str
) -> None:
    api(service.url, "POST", "/runs", {"id": run_id, "project": "commands"})
    first = _cli(service.url, "stop", run_id, "--reason", "reward hacking")
    assert first.returncode == 0, first.stderr
    [command] = api(service.url, "GET", f"/runs/{run_id}/commands")["data"]
    assert (command["kind"], command["reason"]) == ("stop", "reward hacking")
    assert first.stdout.strip() == (
        f"stop asked for run {run_id} (command {command['id']}): it reaches the trainer with "
        "its next batch, or within ~5 s when the trainer logs less often"
    )
    again = _cli(service.url, "stop", run_id)
    assert again.returncode == 1
    assert f"already has a stop waiting: command {command['id']}" in again.stdout
    assert "Traceback" not in again.stdout + again.stderr
    checkpoint = _cli(service.url, "checkpoint", run_id)
    assert checkpoint.returncode == 0 and "checkpoint asked" in checkpoint.stdout
    missing = _cli(service.url, "stop", "no-such-run")
    assert missing.returncode == 1 and "no run has the id or name 'no-such-run'" in missing.stdout


def test_commands_cli_names_a_run_by_its_name_or_project_and_name(
    service: ServiceProcess, run_id: str
) -> None:
    project, name = new_run_id("proj"), new_run_id("named")
    api(service.url, "POST", "/runs", {"id": run_id, "project": project, "name": name})
    stopped = _cli(service.url, "stop", name, "--reason", "by name")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert stopped.stdout.startswith(f"stop asked for run {name} (command ")
    saved = _cli(service.url, "checkpoint", f"{project}/{name}")
    assert saved.returncode == 0, saved.stdout + saved.stderr
    commands = api(service.url, "GET", f"/runs/{run_id}/commands")["data"]
    assert [(c["kind"], c["reason"]) for c in commands] == [
        ("stop", "by name"),
        ("checkpoint", None),
    ]
    elsewhere = _cli(service.url, "stop", f"other/{name}")
    assert elsewhere.returncode == 1 and "in project 'other'" in elsewhere.stdout


def test_commands_stop_and_checkpoint_a_real_trl_grpo_trainer(
    service: ServiceProcess, run_id: str, spool_dir: Path, tmp_path: Path, offline: None
) -> None:
    """Someone asks from outside while a TRL GRPOTrainer trains: it saves, then stops."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlguard.integrations.transformers import RLGuardCallback

    args = GRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        max_steps=MAX_STEPS,
        logging_steps=1,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=4,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=str(tiny_model_dir(tmp_path)),
        reward_funcs=lambda completions, **kwargs: [float(len(c)) for c in completions],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["a b", "c d", "e f", "g h"] * 20}),
    )
    RLGuardCallback.attach(
        trainer,
        project="commands",
        run_id=run_id,
        url=service.url,
        spool_dir=str(spool_dir),
        command_poll_s=0.2,
        **FAST,
    )

    def logged_three_steps() -> bool:
        try:  # the hook creates the run with its first batch
            return (api(service.url, "GET", f"/runs/{run_id}")["last_step"] or 0) >= 2
        except urllib.error.HTTPError as exc:
            assert exc.code == 404
            return False

    def ask_when_training() -> None:
        wait_for(logged_three_steps, 120, "three logged steps")
        api(service.url, "POST", f"/runs/{run_id}/checkpoint", {"reason": "keep it"})
        api(service.url, "POST", f"/runs/{run_id}/stop", {"reason": "seen enough"})

    asker = threading.Thread(target=ask_when_training)
    asker.start()
    trainer.train()
    asker.join()
    assert 3 <= trainer.state.global_step < MAX_STEPS
    assert list((tmp_path / "grpo").glob("checkpoint-*")), "the checkpoint command saved one"
    run = api(service.url, "GET", f"/runs/{run_id}")
    assert run["status"] == "stopped"
    commands = api(service.url, "GET", f"/runs/{run_id}/commands")["data"]
    assert [(c["kind"], c["state"]) for c in commands] == [
        ("checkpoint", "acted"),
        ("stop", "acted"),
    ]
    assert run["summary"]["stopped_by"]["command"] == commands[1]["id"]


def test_commands_cli_backtests_a_policy_over_a_projects_runs(service: ServiceProcess) -> None:
    project = new_run_id("proj")
    sick = new_run_id("sick")
    api(service.url, "POST", "/runs", {"id": sick, "project": project})
    steps = [{"step": s, "values": {"actor/entropy": "NaN"}} for s in range(10)]
    api(service.url, "POST", f"/runs/{sick}/batches", {"batch_id": "nan", "steps": steps})
    [alert] = api(service.url, "GET", f"/runs/{sick}/alerts")["data"]
    found = _cli(service.url, "detect", "--policy", "nonfinite@warn:4", "--project", project)
    assert found.returncode == 0, found.stderr
    assert found.stdout.splitlines() == [
        f"{sick}: stop at step 4 of 9 (alert {alert['id']}), 5 step(s) saved",
        f"1 of 1 run(s) in {project!r} would stop; 5 step(s) saved in all",
    ]
    for bad in (["--policy", "Entropy!", "--project", project], ["--policy", "nonfinite"], []):
        refused = _cli(service.url, "detect", *bad)
        assert refused.returncode == 2 and "--policy ALERT[@SEVERITY]" in refused.stdout, bad

"""The W&B tee, ``rlguard watch`` and ``rlguard import`` of W&B run directories, with the real
wandb client offline (``WANDB_MODE=offline``, its files in a tmp dir, no network), a real
rlguard service and real processes."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import urllib.error
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rlguard._report import Warnings
from rlguard.integrations import importers
from rlguard.integrations import wandb as wandb_tee
from rlguard.integrations.wandb_files import (
    WandbFileError,
    chunks,
    read_run,
    run_file,
    system_values,
)
from tests.hook import wandb_loop
from tests.hook.hookutil import (
    ROOT,
    ServiceProcess,
    api,
    child_env,
    free_port,
    stored_series,
    wait_for,
)

LOOP = str(Path(wandb_loop.__file__))
WANDB_TIMEOUT_S = 180
VOLATILE_KEYS = ("_timestamp", "_runtime", "_wandb")  # differ between any two runs


def wandb_settings(folder: Path) -> dict[str, str]:
    return {
        "WANDB_MODE": "offline",
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(folder),
    }


@pytest.fixture
def wandb_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """W&B offline in this process, its files under a fresh folder (W&B reads its settings
    once per process: its teardown makes the next test's ``wandb.init`` read them again)."""
    import wandb

    folder = tmp_path / "wandb-files"
    folder.mkdir()
    for key, value in wandb_settings(folder).items():
        monkeypatch.setenv(key, value)
    yield folder
    wandb.teardown()


@pytest.fixture
def attached(service: ServiceProcess, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("RLGUARD_URL", service.url)
    monkeypatch.setenv("RLGUARD_GPU", "0")
    wandb_tee.attach()
    yield
    wandb_tee.detach()


def run_loop(
    folder: Path, url: str, *args: str, watch: bool = True, **env: str
) -> subprocess.CompletedProcess:
    """``wandb_loop.py`` as a process, under ``rlguard watch`` or not (``env``: more settings)."""
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, LOOP, *args]
    if watch:
        command = [sys.executable, "-m", "rlguard", "watch", "--", *command]
    env = child_env(RLGUARD_URL=url, RLGUARD_GPU="0", **wandb_settings(folder), **env)
    return subprocess.run(
        command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=WANDB_TIMEOUT_S
    )


def read_when_written(run_dir: Path, last_step: int) -> Any:
    """W&B's record of an in-process run once its writer has flushed the row at ``last_step``
    (``wandb.finish()`` returns before wandb-core has written everything)."""

    def written() -> Any:
        try:
            run = read_run(run_dir)
        except WandbFileError:
            return None
        return run if last_step in run.steps else None

    return wait_for(written, 60, f"W&B to write step {last_step} under {run_dir}")


def series_without_system(url: str, run_id: str) -> dict[str, dict[int, Any]]:
    return {k: v for k, v in stored_series(url, run_id).items() if not k.startswith("system")}


def recorded_by_wandb(run_dir: Path) -> dict[str, Any]:
    """What W&B wrote for a run, less timestamps: its files' names, the console it captured,
    and from its transaction log (decoded by wandb's own protobuf classes) the history rows,
    metric definitions, config, tags, name and final summary."""
    from wandb.proto import wandb_internal_pb2

    history, metrics, summary = [], [], {}
    run: Any = None
    source = run_file(run_dir)
    for raw in chunks(source.read_bytes(), source):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append({_key(i): i.value_json for i in record.history.item})
        elif kind == "metric":
            metrics.append(str(record.metric))
        elif kind == "summary":
            summary.update({_key(i): i.value_json for i in record.summary.update})
        elif kind == "run":
            run = record.run
    config = {_key(i): i.value_json for i in run.config.update}
    files = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())
    return {
        "files": files,
        "console": [p.read_text() for p in run_dir.glob("files/output.log")],
        "history": [_stable(row) for row in history],
        "metrics": metrics,
        "summary": _stable(summary),
        "config": _stable(config),
        "identity": (run.run_id, run.project, run.display_name, list(run.tags)),
    }


def without_rlguard_lines(recorded: dict[str, Any]) -> dict[str, Any]:
    """``recorded`` less the lines rlguard wrote to the console W&B captured (and its console
    file when nothing else is left in it)."""
    console = [
        "".join(x for x in text.splitlines(keepends=True) if not x.startswith("rlguard: "))
        for text in recorded["console"]
    ]
    console = [text for text in console if text]
    files = [f for f in recorded["files"] if console or f != "files/output.log"]
    return {**recorded, "console": console, "files": files}


def _key(item: Any) -> str:
    return ".".join(item.nested_key) if item.nested_key else item.key


def _stable(values: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in values.items() if not k.startswith(VOLATILE_KEYS)}


def test_wandb_tee_stores_the_rows_wandb_commits(wandb_dir: Path, service: Any, attached: None):
    import wandb

    wandb_id = uuid.uuid4().hex[:8]
    wandb_loop.log_step_semantics(wandb, wandb_id)
    run_id = f"wandb-semantics-{wandb_id}"
    assert series_without_system(service.url, run_id) == wandb_loop.EXPECTED_SERIES
    recorded = read_when_written(wandb_dir / "wandb" / "latest-run", 12)  # W&B's own rows
    by_key: dict[str, dict[int, Any]] = {}
    for step, values in recorded.steps.items():
        for key, value in values.items():
            if not key.startswith("system"):
                by_key.setdefault(key, {})[step] = value
    assert by_key == wandb_loop.EXPECTED_SERIES
    stored = api(service.url, "GET", f"/runs/{run_id}")
    assert (stored["name"], stored["project"], stored["tags"]) == (
        "semantics",
        "semantics",
        ["tee"],
    )
    assert stored["status"] == "finished"
    assert stored["config"]["lr"] == 1e-6 and stored["config"]["model"] == {"layers": 2}
    assert stored["config"]["wandb"]["id"] == wandb_id
    assert stored["summary"]["best_reward"] == 0.9 and stored["summary"]["late"] == 1.0


class _Config:
    """W&B's run config as the tee reads it: ``as_dict()``, its own ``_wandb`` entry inside."""

    def as_dict(self) -> dict[str, Any]:
        return {"lr": 1e-6, "model": {"layers": 2}, "out": Path("/ckpt"), "_wandb": {"x": 1}}


def test_wandb_run_settings_keep_the_runs_identity_config_tags_and_link(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RLGUARD_PROJECT", raising=False)
    url = "https://wandb.ai/team/grpo/runs/abc123"
    tags = ("math", "", "t" * (wandb_tee.MAX_TAG_CHARS + 1), "seed0")
    run = SimpleNamespace(  # the attributes of a wandb Run the tee reads, as an online run has them
        id="abc123",
        project="grpo",
        name="seed0",
        url=url,
        dir="/w/files",
        tags=tags,
        config=_Config(),
    )
    assert wandb_tee.run_settings(run) == {
        "run_id": "wandb-grpo-abc123",
        "name": "seed0",
        "project": "grpo",
        "tags": ["math", "seed0"],
        "config": {
            "lr": 1e-6,
            "model": {"layers": 2},
            "out": "/ckpt",
            "wandb": {"id": "abc123", "project": "grpo", "url": url, "dir": "/w/files"},
        },
    }
    monkeypatch.setenv("RLGUARD_PROJECT", "team")  # the rlguard project set: W&B's is kept aside
    assert "project" not in wandb_tee.run_settings(run)


def test_wandb_attach_after_init_tees_the_live_run_and_detach_stops_teeing(
    wandb_dir: Path, service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wandb

    monkeypatch.setenv("RLGUARD_URL", service.url)
    monkeypatch.setenv("RLGUARD_GPU", "0")
    run = wandb.init(project="late")
    wandb.log({"x": 0.0})  # before attach: W&B only
    wandb_tee.attach()
    try:
        wandb.log({"x": 1.0})
        run.log({"x": 2.0})
        wandb.finish()
    finally:
        wandb_tee.detach()
    later = wandb.init(project="late")
    wandb.log({"x": 9.0})
    wandb.finish()
    assert wandb_tee.tee_of(later) is None
    assert stored_series(service.url, f"wandb-late-{run.id}") == {"x": {1: 1.0, 2: 2.0}}


@pytest.mark.parametrize("rlguard_up", [True, False], ids=["rlguard-up", "rlguard-down"])
def test_wandb_files_are_the_same_with_and_without_rlguard(
    tmp_path: Path, service: Any, rlguard_up: bool
):
    wandb_id = uuid.uuid4().hex[:8]
    url = service.url if rlguard_up else f"http://127.0.0.1:{free_port()}"  # nothing listens
    spool = tmp_path / "spool"
    recorded = {}
    for watch in (False, True):
        folder = tmp_path / ("watched" if watch else "plain")
        done = run_loop(
            folder, url, "semantics", wandb_id, watch=watch, RLGUARD_SPOOL_DIR=str(spool)
        )
        assert done.returncode == 0, done.stderr
        recorded[watch] = recorded_by_wandb((folder / "wandb" / "latest-run").resolve())
    if not rlguard_up:
        # rlguard's "service is unreachable" warning goes to the terminal, whose output W&B
        # captures when its console capture is already on (a race): the only difference allowed
        recorded[True] = without_rlguard_lines(recorded[True])
    assert recorded[True] == recorded[False]
    assert len(recorded[False]["history"]) == 9  # steps 0-2, 5-9 and 12
    assert f"run-{wandb_id}.wandb" in recorded[False]["files"]
    if not rlguard_up:  # the watched run's points wait in the spool for the service
        assert any(spool.rglob("*")), "the watched run spooled nothing"
        return
    stored = series_without_system(service.url, f"wandb-semantics-{wandb_id}")
    assert stored == wandb_loop.EXPECTED_SERIES  # only the watched run reached rlguard


def test_watch_raises_the_entropy_collapse_alert_while_the_loop_runs(tmp_path: Path, service: Any):
    wandb_id = uuid.uuid4().hex[:8]
    done = run_loop(tmp_path, service.url, "collapse", wandb_id, service.url)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("alert "))
    alert = json.loads(line.split(" ", 1)[1])
    assert alert["detector"] == "entropy_collapse" and alert["severity"] == "critical"
    assert alert["first_step"] < wandb_loop.COLLAPSE_STEPS  # seen before the loop's last step
    stored = api(service.url, "GET", f"/runs/wandb-collapse-{wandb_id}")
    assert stored["status"] == "finished" and stored["config"]["kl_placement"] == "none"


@pytest.mark.parametrize("resume", ["allow", "must"])
def test_watch_resumed_wandb_run_continues_the_same_rlguard_run(
    tmp_path: Path, service: Any, resume: str
):
    """The second process resumes with ``resume``. Offline, W&B cannot ask its server whether
    the run exists, so it accepts "must" without checking (``run.resumed`` stays False):
    what can be tested here is that rlguard continues the same run under either mode."""
    wandb_id = uuid.uuid4().hex[:8]
    for first, mode in ((0, "allow"), (5, resume)):
        args = ("steps", wandb_id, str(first), "5", "resumed", mode)
        done = run_loop(tmp_path / f"part{first}", service.url, *args)
        assert done.returncode == 0, done.stderr
    stored = series_without_system(service.url, f"wandb-resumed-{wandb_id}")
    assert stored == {"score": {step: float(step) for step in range(10)}}


def test_watch_tees_a_python_process_the_command_starts(tmp_path: Path, service: Any):
    wandb_id = uuid.uuid4().hex[:8]
    loop = ("steps", wandb_id, "0", "5", "child")
    done = run_loop(tmp_path, service.url, "child", *loop)  # the loop runs in a grandchild
    assert done.returncode == 0, done.stdout + done.stderr
    stored = series_without_system(service.url, f"wandb-child-{wandb_id}")
    assert stored == {"score": {step: float(step) for step in range(5)}}
    assert api(service.url, "GET", f"/runs/wandb-child-{wandb_id}")["status"] == "finished"


def test_watch_tees_a_ray_actor_the_command_starts(tmp_path: Path, service: Any):
    """verl logs from its TaskRunner, a Ray actor: a worker process the local cluster starts,
    which inherits the watched command's environment."""
    wandb_id = uuid.uuid4().hex[:8]
    done = run_loop(tmp_path, service.url, "ray-actor", "steps", wandb_id, "0", "5", "ray")
    assert done.returncode == 0, done.stdout + done.stderr
    stored = series_without_system(service.url, f"wandb-ray-{wandb_id}")
    assert stored == {"score": {step: float(step) for step in range(5)}}
    assert api(service.url, "GET", f"/runs/wandb-ray-{wandb_id}")["status"] == "finished"


def test_watch_exit_status_is_the_commands_and_the_hidden_sitecustomize_runs(
    tmp_path: Path, service: Any
):
    hidden = tmp_path / "site"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text("import builtins\nbuiltins.HIDDEN_RAN = True\n")
    script = (
        "import builtins, sys, wandb\n"
        "from rlguard.integrations import wandb as tee\n"
        "print(getattr(builtins, 'HIDDEN_RAN', False), bool(tee._originals))\n"
        "sys.exit(7)\n"
    )
    env = child_env(RLGUARD_URL=service.url, **wandb_settings(tmp_path))
    env["PYTHONPATH"] += os.pathsep + str(hidden)
    done = subprocess.run(
        [sys.executable, "-m", "rlguard", "watch", "--", sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=WANDB_TIMEOUT_S,
    )
    assert (done.returncode, done.stdout.split()) == (7, ["True", "True"]), done.stderr


def test_watch_run_left_unfinished_is_finished_at_exit_with_its_pending_row(
    tmp_path: Path, service: Any
) -> None:
    wandb_id = uuid.uuid4().hex[:8]
    script = (
        "import wandb\n"
        f"wandb.init(project='unfinished', id={wandb_id!r})\n"
        "for step in range(3):\n"
        "    wandb.log({'x': float(step)})\n"
        "wandb.log({'late': 1.0}, step=10)  # pending: W&B commits it at exit\n"
    )
    env = child_env(RLGUARD_URL=service.url, RLGUARD_GPU="0", **wandb_settings(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "rlguard", "watch", "--", sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=WANDB_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    run_id = f"wandb-unfinished-{wandb_id}"
    assert series_without_system(service.url, run_id) == {
        "x": {0: 0.0, 1: 1.0, 2: 2.0},
        "late": {10: 1.0},
    }
    assert api(service.url, "GET", f"/runs/{run_id}")["status"] == "finished"


def test_watch_signals_reach_the_command(tmp_path: Path, service: Any) -> None:
    command = [sys.executable, "-m", "rlguard", "watch", "--", sys.executable, LOOP, "wait-signal"]
    proc = subprocess.Popen(
        command, env=child_env(RLGUARD_URL=service.url), stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 42
    finally:
        proc.kill()


@pytest.mark.parametrize(
    ("env", "command", "message"),
    [
        ({"RLGUARD_FLUSH_INTERVAL_S": "soon"}, True, "RLGUARD_FLUSH_INTERVAL_S='soon'"),
        ({}, False, "name the command, e.g. rlguard watch -- python train.py"),
    ],
)
def test_watch_bad_input_is_refused_before_a_command_starts(
    tmp_path: Path, env: dict[str, str], command: bool, message: str
) -> None:
    marker = tmp_path / "started"
    argv = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"] if command else ["--"]
    done = subprocess.run(
        [sys.executable, "-m", "rlguard", "watch", *argv],
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and message in done.stderr
    assert not marker.exists()


def test_wandb_tee_error_is_warned_once_and_wandb_records_everything(
    wandb_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import wandb

    monkeypatch.setenv("RLGUARD_MAX_QUEUE_MB", "-1")  # refused by rlguard.init
    monkeypatch.setattr(wandb_tee, "_warnings", Warnings())
    wandb_tee.attach()
    try:
        with caplog.at_level(logging.WARNING, logger="rlguard"):
            run = wandb.init(project="refused")
            for step in range(3):
                wandb.log({"x": float(step)})
            wandb.finish()
    finally:
        wandb_tee.detach()
    assert wandb_tee.tee_of(run) is None
    warnings = [r.getMessage() for r in caplog.records if "W&B tee failed" in r.getMessage()]
    assert len(warnings) == 1 and "RLGUARD_MAX_QUEUE_MB" in warnings[0]
    assert read_when_written(wandb_dir / "wandb" / "latest-run", 2).steps.keys() >= {0, 1, 2}


def test_wandb_tee_service_sigkilled_mid_run_stores_every_point_once(
    tmp_path: Path, wandb_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wandb

    service = ServiceProcess(tmp_path / "killed.db").start()
    monkeypatch.setenv("RLGUARD_URL", service.url)
    monkeypatch.setenv("RLGUARD_GPU", "0")
    monkeypatch.setenv("RLGUARD_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("RLGUARD_BACKOFF_CAP_S", "0.5")
    wandb_tee.attach()
    try:
        run = wandb.init(project="killed")
        run_id = f"wandb-killed-{run.id}"
        rlguard_run = wandb_tee.tee_of(run)
        assert rlguard_run is not None
        for step in range(60):
            wandb.log({"score": float(step), "loss": 1.0 / (step + 1)})
            if step == 19:
                wait_for(lambda: _stored_steps(service.url, run_id) >= 1, 60, "a first batch")
                service.kill()
            if step == 39:
                wait_for(lambda: rlguard_run.status().spooled > 0, 60, "a spooled batch")
                service.start()
        wandb.finish()
        status = rlguard_run.status()
        assert status.spooled > 0 and status.spool_batches == 0 and status.dead_lettered == 0
        assert stored_series(service.url, run_id) == {
            "score": {step: float(step) for step in range(60)},
            "loss": {step: 1.0 / (step + 1) for step in range(60)},
        }
    finally:
        wandb_tee.detach()
        service.stop()


def _stored_steps(url: str, run_id: str) -> int:
    try:
        return len(stored_series(url, run_id).get("score", {}))
    except urllib.error.HTTPError:  # the run is not created yet
        return 0


FOLLOWED_STEPS = 2000  # enough rows for W&B to write blocks of its log before finishing


def test_follow_wandb_tails_a_live_run_and_its_resumption(tmp_path: Path, service: Any) -> None:
    wandb_id = uuid.uuid4().hex[:8]
    command = ["follow", "wandb", str(tmp_path / "wandb"), "--url", service.url, "--poll-s", "0.1"]
    follow = subprocess.Popen(
        [sys.executable, "-m", "rlguard", *command],
        env=child_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        done = run_loop(tmp_path, service.url, "grow", wandb_id, service.url, str(FOLLOWED_STEPS))
        assert done.returncode == 0, done.stdout + done.stderr  # rlguard had rows mid-run
        resumed = [str(FOLLOWED_STEPS), "3", "followed"]
        done = run_loop(tmp_path, service.url, "steps", wandb_id, *resumed, watch=False)
        assert done.returncode == 0, done.stderr
        run_id = f"wandb-followed-{wandb_id}"
        wait_for(
            lambda: len(stored_series(service.url, run_id).get("score", {})) == 3,
            120,
            "the resumed run's rows",
        )
        follow.send_signal(signal.SIGINT)
        assert follow.wait(timeout=120) == 0
    finally:
        follow.kill()
    stored = series_without_system(service.url, run_id)
    assert stored["k3"] == {step: float(3 * step) for step in range(FOLLOWED_STEPS)}
    assert stored["score"] == {step: float(step) for step in range(FOLLOWED_STEPS, 2003)}
    assert api(service.url, "GET", f"/runs/{run_id}")["status"] == "finished"


@pytest.fixture(scope="module")
def plain_run_dir(tmp_path_factory: pytest.TempPathFactory, service: Any) -> Path:
    """A W&B run written without rlguard: the step rules' loop, offline."""
    folder = tmp_path_factory.mktemp("plain-wandb")
    done = run_loop(folder, service.url, "semantics", uuid.uuid4().hex[:8], watch=False)
    assert done.returncode == 0, done.stderr
    return Path(os.path.realpath(folder / "wandb" / "latest-run"))


def import_wandb(path: Path, url: str, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rlguard", "import", str(path), "--url", url, *options],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_import_wandb_run_dir_stores_the_live_points(plain_run_dir: Path, service: Any) -> None:
    run_id = "imported-" + uuid.uuid4().hex[:8]
    done = import_wandb(plain_run_dir.parent.parent, service.url, "--run-id", run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    stored = stored_series(service.url, run_id)
    assert {k: v for k, v in stored.items() if not k.startswith("system")} == (
        wandb_loop.EXPECTED_SERIES
    )
    assert "system/memory_percent" in stored  # W&B's system stats, as rlguard's panels name them
    run = api(service.url, "GET", f"/runs/{run_id}")
    assert (run["name"], run["tags"], run["summary"]["best_reward"]) == ("semantics", ["tee"], 0.9)
    assert (run["config"]["lr"], run["config"]["model"]) == (1e-6, {"layers": 2})  # the loop's


def _truncated(data: bytes) -> bytes:
    return data[:-20]


def _corrupt(data: bytes) -> bytes:
    return data[:1000] + bytes([data[1000] ^ 0xFF]) + data[1001:]


def _version_9(data: bytes) -> bytes:
    return data[:6] + b"\x09" + data[7:]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_truncated, "is truncated at byte"),
        (_corrupt, "corrupt record at byte"),
        (_version_9, ".wandb log version 9 is not supported"),
        (None, "is not a W&B run: no run-<id>.wandb in it"),
    ],
)
def test_import_wandb_bad_input_says_why_and_imports_nothing(
    plain_run_dir: Path, service: Any, tmp_path: Path, damage: Any, message: str
) -> None:
    target = tmp_path / "run-x.wandb"
    if damage is None:
        target = tmp_path  # an empty directory
    else:
        target.write_bytes(damage(run_file(plain_run_dir).read_bytes()))
    run_id = "refused-" + uuid.uuid4().hex[:8]
    done = import_wandb(target, service.url, "--run-id", run_id, "--format", "wandb")
    assert done.returncode == 2
    assert done.stdout.startswith("import failed, nothing imported:") and message in done.stdout
    with pytest.raises(urllib.error.HTTPError) as refused:
        api(service.url, "GET", f"/runs/{run_id}")
    assert refused.value.code == 404


SCAN_HISTORY = (
    '{"_step": 0, "_runtime": 1.2, "loss": 1.0, "eval/acc": null, "train": {"kl": 0.01}}\n'
    '{"_step": 1, "_timestamp": 1.7e9, "loss": 0.5, "img": {"_type": "image-file", "width": 8}}\n'
    "not json\n"
    '{"_step": 2, "eval/acc": 0.7, "note": "text"}\n'
)
CHART_CSV = (
    '"Step","run-a - loss","run-a - loss__MIN","run-a - loss__MAX"\n'
    '"0","1.0","0.9","1.1"\n'
    '"5","0.5","0.4","0.6"\n'
    '"6","",""\n'
)
TWO_RUNS_CSV = '"Step","run-a - loss","run-b - loss"\n"0","1.0","2.0"\n'


@pytest.mark.parametrize(
    ("name", "text", "fmt", "records"),
    [
        (
            "history.jsonl",
            SCAN_HISTORY,
            "wandb-history",
            [(0, {"loss": 1.0, "train.kl": 0.01}), (1, {"loss": 0.5}), (2, {"eval/acc": 0.7})],
        ),
        ("chart.csv", CHART_CSV, "wandb-csv", [(0, {"loss": 1.0}), (5, {"loss": 0.5}), (6, {})]),
        ("two.csv", TWO_RUNS_CSV, "wandb-csv", [(0, {"run-a - loss": 1.0, "run-b - loss": 2.0})]),
    ],
)
def test_import_wandb_history_exports(
    tmp_path: Path, name: str, text: str, fmt: str, records: list[Any]
) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert importers.detect_format(path) == fmt
    assert list(importers.READERS[fmt](path)) == records


@pytest.mark.parametrize(
    ("wandb_stats", "expected"),
    [
        ({"gpu.0.gpu": 87.0}, {"system/gpu0/utilization": 87.0}),
        ({"gpu.1.memoryAllocatedBytes": 2 * 1024**3}, {"system/gpu1/memory_used_gb": 2.0}),
        (
            {"gpu.0.powerWatts": 300.5, "gpu.0.temp": 61},
            {
                "system/gpu0/power_w": 300.5,
                "system/gpu0/temperature_c": 61.0,
            },
        ),
        ({"gpu.0.smClock": 1980}, {"system/gpu0/sm_clock_mhz": 1980.0}),
        ({"memory_percent": 40.0}, {"system/memory_percent": 40.0}),
        ({"proc.memory.rssMB": 2048.0}, {"system/process_rss_gb": 2.0}),
        ({"disk.vda.in": 3.0, "cpu": "n/a"}, {"system.disk.vda.in": 3.0}),
    ],
)
def test_wandb_system_values_map_onto_rlguard_panel_keys(
    wandb_stats: dict[str, Any], expected: dict[str, float]
) -> None:
    assert system_values(wandb_stats) == expected


def test_import_rlguard_does_not_import_wandb() -> None:
    code = "import sys, rlguard, rlguard.integrations.wandb; print('wandb' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "False", done.stderr


def test_watch_stop_asked_of_rlguard_stops_the_run_as_wandbs_own_stop_does(
    tmp_path: Path, service: Any
):
    wandb_id = uuid.uuid4().hex[:8]
    done = run_loop(tmp_path, service.url, "stoppable", wandb_id, service.url)
    assert "asked to stop at step 5" in done.stdout, done.stdout + done.stderr
    assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr  # W&B's way: SIGINT
    run_id = f"wandb-stoppable-{wandb_id}"
    stored = api(service.url, "GET", f"/runs/{run_id}")
    assert stored["status"] == "stopped" and stored["last_step"] < wandb_loop.STOPPABLE_STEPS - 1
    [command] = api(service.url, "GET", f"/runs/{run_id}/commands")["data"]
    assert (command["kind"], command["state"]) == ("stop", "acted")
    assert stored["summary"]["stopped_by"]["command"] == command["id"]

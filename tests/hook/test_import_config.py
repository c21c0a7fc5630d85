"""verl's printed config becomes the imported run's config: the detectors and the grid read it."""

from __future__ import annotations

import pprint
from pathlib import Path

from rlguard.integrations import importers
from tests.hook.hookutil import ServiceProcess, alert_lines, api
from tests.hook.test_integrations import cli

CONFIG = {
    "actor_rollout_ref": {
        "actor": {
            "ppo_epochs": 2,
            "ppo_mini_batch_size": 64,
            "clip_ratio": 0.2,
            "use_kl_loss": True,
            "kl_loss_coef": 0.001,
            "optim": {"lr": 1e-06, "warmup_style": "constant"},
        },
        "rollout": {"n": 5, "name": "vllm", "temperature": 1.0},
    },
    "algorithm": {"adv_estimator": "grpo", "kl_ctrl": {"kl_coef": 0.001, "type": "fixed"}},
    "data": {"train_batch_size": 256, "max_response_length": 1024, "path": None},
    "trainer": {"logger": ["console", "wandb"], "total_epochs": 15},
}


def verl_log(prefix: str = "\x1b[36m(TaskRunner pid=4242)\x1b[0m ") -> str:
    """A verl console log as Ray prints it: the pprint'd config, then the step lines."""
    printed = pprint.pformat(CONFIG, width=60).splitlines()
    head = "".join(f"{prefix}{line}\n" for line in printed)
    steps = "".join(
        f"{prefix}step:{s} - actor/entropy:{0.6 - s / 1e3:.3f} - actor/ppo_kl:0.001\n"
        for s in range(1, 31)
    )
    return "ray init\n" + head + steps


def test_read_verl_config_takes_the_printed_config_behind_ray_prefixes(tmp_path: Path) -> None:
    path = tmp_path / "verl.log"
    path.write_text(verl_log())
    assert len(pprint.pformat(CONFIG, width=60).splitlines()) > 10  # a multi-line print
    assert importers.read_verl_config(path) == CONFIG
    path.write_text(verl_log(prefix=""))
    assert importers.read_verl_config(path) == CONFIG


def test_read_verl_config_is_none_without_a_whole_config(tmp_path: Path) -> None:
    path = tmp_path / "verl.log"
    path.write_text("step:1 - actor/entropy:0.5\n{'late': 1}\n")
    assert importers.read_verl_config(path) is None  # step lines came first
    path.write_text("".join(verl_log().splitlines(keepends=True)[:8]))
    assert importers.read_verl_config(path) is None  # cut off inside the config


def test_import_verl_console_keeps_its_config_for_the_detectors_and_grid(
    service: ServiceProcess, run_id: str, tmp_path: Path
) -> None:
    log = tmp_path / "verl.log"
    log.write_text(verl_log())
    done = cli("import", str(log), "--url", service.url, "--run-id", run_id, "--project", "cfg")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "imported 30 step(s)" in done.stdout
    run = api(service.url, "GET", f"/runs/{run_id}")
    assert run["config"]["actor_rollout_ref"]["actor"]["ppo_epochs"] == 2
    assert run["config"]["algorithm"]["kl_ctrl"]["kl_coef"] == 0.001
    listed = api(service.url, "GET", "/runs?project=cfg&fields=hparam.lr,hparam.kl_coef")
    [row] = listed["data"]
    assert row["values"] == {"hparam.lr": 1e-06, "hparam.kl_coef": 0.001}


def test_import_prints_each_alert_as_it_opens(
    service: ServiceProcess, run_id: str, tmp_path: Path
) -> None:
    """A person watching the terminal of import, follow or demo sees one line per alert."""
    log = tmp_path / "verl.log"
    log.write_text(
        "".join(f"step:{s} - actor/entropy:nan - actor/ppo_kl:0.001\n" for s in range(40))
    )
    done = cli("import", str(log), "--url", service.url, "--run-id", run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    [alert] = api(service.url, "GET", f"/runs/{run_id}/alerts")["data"]
    assert (alert["detector"], alert["severity"]) == ("nonfinite", "critical")
    assert alert_lines(done.stderr, run_id, alert) != []

"""Helpers of the reliability tests: trainer processes running ``trainer.py``, and what the
service should hold once they are done."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.backend.test_alerts import _wire
from tests.hook.hookutil import PYTHONPATH, ROOT, child_env
from tests.hook.trainer_script import samples_at
from tests.reliability.trainer import steps

TRAINER = Path(__file__).with_name("trainer.py")
FINISH_TIMEOUT_S = 180.0


class Trainer:
    """One ``trainer.py`` process streaming a seeded scenario as run ``run_id``."""

    def __init__(self, url: str, run_id: str, folder: Path, seed: int, step_sleep_s: float):
        self.run_id, self.seed = run_id, seed
        folder.mkdir(parents=True, exist_ok=True)
        self.progress_file = folder / "progress"
        self.release_file = folder / "release"
        command = [sys.executable, str(TRAINER), url, run_id, str(folder / "spool"), str(seed)]
        command += [str(step_sleep_s), str(self.progress_file), str(self.release_file)]
        env = child_env(PYTHONPATH=os.pathsep.join((PYTHONPATH, str(ROOT))))
        self.proc = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def progress(self) -> int:
        """Steps logged so far, as the trainer last wrote them."""
        try:
            return int(self.progress_file.read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def finish(self) -> dict[str, Any]:
        """Let the trainer end its run; its final ``run.status()`` once it exited with 0."""
        self.release_file.touch()
        out, err = self.proc.communicate(timeout=FINISH_TIMEOUT_S)
        assert self.proc.returncode == 0, (out, err[-3000:])
        status: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return status

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.communicate(timeout=30)


def expected_series(seed: int) -> dict[str, dict[int, Any]]:
    """key -> {step: wire value} of everything a trainer with ``seed`` logs."""
    out: dict[str, dict[int, Any]] = {}
    for step, values in steps(seed):
        for key, value in values.items():
            out.setdefault(key, {})[step] = _wire(value)
    return out


def expected_samples(seed: int) -> dict[int, list[str]]:
    return {step: [str(s["response"]) for s in samples_at(step)] for step, _ in steps(seed)}

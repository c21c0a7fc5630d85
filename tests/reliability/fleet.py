"""Helpers of the reliability tests: trainer processes running ``trainer.py``, and what the
service should hold once they are done."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx

import rlguard
from rlguard.protocol import to_wire
from tests.hook.hookutil import PYTHONPATH, ROOT, child_env
from tests.reliability.trainer import SCENARIO, samples_at, steps

TRAINER = Path(__file__).with_name("trainer.py")
FINISH_TIMEOUT_S = 180.0
RETRY_PAUSE_S = 0.05  # how long an AckedWriter waits before sending an unanswered batch again


class Trainer:
    """One ``trainer.py`` process streaming a seeded scenario as run ``run_id``, its spool in
    ``folder/spool``; ``env`` adds RLGUARD_* settings, ``prefix`` wraps the command."""

    def __init__(
        self,
        url: str,
        run_id: str,
        folder: Path,
        seed: int,
        step_sleep_s: float,
        env: dict[str, str] | None = None,
        prefix: list[str] | None = None,
    ) -> None:
        self.run_id, self.seed = run_id, seed
        folder.mkdir(parents=True, exist_ok=True)
        self.spool = folder / "spool"
        self.progress_file = folder / "progress"
        self.release_file = folder / "release"
        command = [sys.executable, str(TRAINER), url, run_id, str(self.spool), str(seed)]
        command += [str(step_sleep_s), str(self.progress_file), str(self.release_file)]
        environment = child_env(PYTHONPATH=os.pathsep.join((PYTHONPATH, str(ROOT))), **(env or {}))
        self.stderr = ""
        self.proc = subprocess.Popen(
            [*(prefix or []), *command],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def _report(self) -> dict[str, Any]:
        try:
            report: dict[str, Any] = json.loads(self.progress_file.read_text())
        except FileNotFoundError:
            return {"steps": 0, "status": {}}
        return report

    def progress(self) -> int:
        """Steps logged so far, as the trainer last wrote them (fails once it died)."""
        if self.proc.poll() not in (None, 0):
            raise AssertionError(f"trainer {self.run_id} failed: {self.proc.communicate()[1]}")
        return int(self._report()["steps"])

    def status(self) -> dict[str, Any]:
        """The trainer's ``run.status()`` as it last wrote it (every 10 steps, then often)."""
        status: dict[str, Any] = self._report()["status"]
        return status

    def alive(self) -> bool:
        return self.proc.poll() is None

    def finish(self) -> dict[str, Any]:
        """Let the trainer end its run; its final ``run.status()`` once it exited with 0."""
        self.release_file.touch()
        out, self.stderr = self.proc.communicate(timeout=FINISH_TIMEOUT_S)
        assert self.proc.returncode == 0, (out, self.stderr[-3000:])
        status: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return status

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.communicate(timeout=30)


def stream_in_process(
    url: str,
    run_id: str,
    seed: int,
    spool: Path,
    first: int = 0,
    last: int | None = None,
    scenario: str = SCENARIO.name,
) -> None:
    """A trainer's data (steps ``first`` to ``last`` - 1) through the hook in this process,
    undisturbed: the reference the faulted runs are compared with."""
    run = rlguard.init(
        project="reliability",
        run_id=run_id,
        url=url,
        spool_dir=str(spool),
        config=SCENARIO.config,
        gpu=False,
    )
    for step, values in steps(seed, first, last, scenario):
        run.log(values, step=step)
        run.log_samples(samples_at(seed, step), step=step)
    status = run.finish(timeout_s=120)
    assert (status.spooled, status.dropped, status.spool_batches) == (0, 0, 0)


def undelivered(status: dict[str, Any]) -> dict[str, int]:
    """What a trainer's final status says it did not deliver (all zero when nothing was lost)."""
    fields = ("dropped", "dropped_steps", "dead_lettered", "spool_batches", "samples_dropped")
    return {f: status[f] for f in (*fields, "samples_dead_lettered")}


def expected_series(
    seed: int, first: int = 0, last: int | None = None, scenario: str = SCENARIO.name
) -> dict[str, dict[int, Any]]:
    """key -> {step: wire value} of everything a trainer with ``seed`` logs (steps
    ``first`` to ``last`` - 1 of it)."""
    out: dict[str, dict[int, Any]] = {}
    for step, values in steps(seed, first, last, scenario):
        for key, value in values.items():
            out.setdefault(key, {})[step] = to_wire(value)
        # what the hook reads from the step's samples: none of them is empty or malformed
        out.setdefault("samples/degenerate_fraction", {})[step] = 0.0
    return out


def expected_samples(seed: int, first: int = 0, last: int | None = None) -> dict[int, list[str]]:
    return {
        step: [str(s["response"]) for s in samples_at(seed, step)]
        for step, _ in steps(seed, first, last)
    }


class AckedWriter:
    """A client thread posting batches of one run in a loop, recording what was acknowledged.

    A batch counts as acknowledged only when its 2xx answer arrived; ``answers`` counts every
    status seen (``None``: no answer, the connection failed) and ``not_json`` keeps any answer
    whose body was not JSON.
    """

    def __init__(self, url: str, run_id: str, keys: int = 20, steps_per_batch: int = 200) -> None:
        self.url, self.run_id = url, run_id
        self.keys, self.steps_per_batch = keys, steps_per_batch
        self.acked: list[int] = []  # batch numbers; batch n holds steps [n·S, (n+1)·S)
        self.answers: collections.Counter[int | None] = collections.Counter()
        self.not_json: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def body(self, n: int) -> dict[str, Any]:
        first = n * self.steps_per_batch
        return {
            "batch_id": f"acked-{n}",
            "steps": [
                {"step": s, "values": {f"k{k}": s + k / 100 for k in range(self.keys)}}
                for s in range(first, first + self.steps_per_batch)
            ],
        }

    def start(self) -> AckedWriter:
        answer = httpx.post(
            f"{self.url}/api/v1/runs", json={"id": self.run_id, "project": "acked"}, timeout=30
        )
        assert answer.status_code in (200, 201), answer.text
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive()

    def _loop(self) -> None:
        n = 0
        with httpx.Client(base_url=self.url, timeout=30) as http:
            while not self._stop.is_set():
                try:
                    answer = http.post(f"/api/v1/runs/{self.run_id}/batches", json=self.body(n))
                except httpx.HTTPError:
                    self.answers[None] += 1
                    self._stop.wait(RETRY_PAUSE_S)  # then the same batch again, as a client
                    continue  # that got no answer does
                self.answers[answer.status_code] += 1
                if answer.status_code == 503:
                    self._stop.wait(RETRY_PAUSE_S)
                try:
                    answer.json()
                except ValueError:
                    self.not_json.append(f"{answer.status_code}: {answer.text[:200]}")
                if answer.is_success:
                    self.acked.append(n)
                    n += 1

    def lost(self, stored: dict[str, dict[int, Any]]) -> list[int]:
        """Acknowledged batches some of whose points ``stored`` (stored_series) lacks."""
        lost = []
        for n in self.acked:
            for entry in self.body(n)["steps"]:
                if any(
                    stored.get(k, {}).get(entry["step"]) != v for k, v in entry["values"].items()
                ):
                    lost.append(n)
                    break
        return lost

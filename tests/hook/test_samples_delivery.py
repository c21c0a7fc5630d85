"""Samples from the hook to a real service: budgets, truncation, spool and replay, the queue."""

from __future__ import annotations

import logging
import urllib.parse
from pathlib import Path

import numpy as np
import pytest
import torch

import rlguard
from rlguard import _packed
from tests.hook.hookutil import FaultProxy, ServiceProcess, api, free_port, stored_series

FAST = {"gpu": False, "flush_interval_s": 0.05, "backoff_base_s": 0.05, "backoff_cap_s": 0.2}


def rollouts(n: int, step: int, text_bytes: int = 100) -> list[dict]:
    """``n`` samples whose rewards are a permutation of 0..n-1 (so best and worst are known)."""
    return [
        {
            "prompt": f"step {step} prompt {i}",
            "response": ("r" * text_bytes) + (" eos" if i % 2 else ""),
            "reward": float((i * 37) % n),
            "kl": torch.tensor(i / 1000),
            "length": np.int64(text_bytes),
            "token_kl": torch.full((3,), 0.5),
            "tokens": ["a", "b", "c"],
        }
        for i in range(n)
    ]


def start(run_id: str, url: str, spool_dir: Path, **settings: object) -> rlguard.Run:
    return rlguard.init(
        project="samples", run_id=run_id, url=url, spool_dir=str(spool_dir), **{**FAST, **settings}
    )


def samples_of(url: str, run_id: str, **params: object) -> dict:
    query = urllib.parse.urlencode({"limit": 1000, **params})
    return dict(api(url, "GET", f"/runs/{run_id}/samples?{query}"))


def test_log_samples_round_trip_keeps_the_budget_best_and_worst(
    service: ServiceProcess, run_id: str, spool_dir: Path
) -> None:
    run = start(run_id, service.url, spool_dir, max_samples_per_step=8)
    run.log({"reward": 1.0}, step=5)
    rlguard.log_samples(rollouts(100, 5))  # default step: the last log()'s
    run.log_samples(rollouts(3, 6), step=np.int64(6))
    rlguard.log({"reward": 2.0}, step=7, samples=rollouts(2, 7))  # with metrics, their step
    rlguard.log_samples(rollouts(12, 7), step=7, split="validation")  # a budget of its own
    status = run.finish()
    assert (status.samples_logged, status.samples_filtered, status.samples_sent) == (21, 96, 21)
    assert samples_of(service.url, run_id, step=7)["count"] == 2
    assert samples_of(service.url, run_id, step=7, split="validation")["count"] == 8
    assert (status.samples_dropped, status.spool_samples) == (0, 0)
    at_five = samples_of(service.url, run_id, step=5, sort="reward", order="desc")
    rewards = [s["reward"] for s in at_five["data"]]
    assert at_five["count"] == 8 and rewards[:2] == [99.0, 98.0] and rewards[-2:] == [1.0, 0.0]
    searched = samples_of(service.url, run_id, q="EOS", min_reward=1, limit=2, offset=1)
    assert searched["count"] == 6 and len(searched["data"]) == 2
    with_tokens = samples_of(service.url, run_id, step=6, tokens="true")["data"]
    assert [s["tokens"]["kl"] for s in with_tokens] == [[0.5, 0.5, 0.5]] * 3
    assert [s["kl"] for s in with_tokens] == pytest.approx([0.0, 0.001, 0.002])


def test_hook_samples_keep_the_hook_s_signals_the_service_derives_none(
    service: ServiceProcess, run_id: str, spool_dir: Path
) -> None:
    run = start(run_id, service.url, spool_dir, max_samples_per_step=4)
    # 3 of 40 truncated, all with low reward: the budget keeps the 2 worst, so the kept four
    # alone would say 2/4, the hook (every sample, before the budget) says 3/40
    records = [{"response": "fine", "reward": float(i), "truncated": i < 3} for i in range(40)]
    run.log({"reward": 1.0}, step=2, samples=records)
    status = run.finish()
    assert status.samples_sent == 4
    assert stored_series(service.url, run_id)["samples/truncated_fraction"] == {
        2: pytest.approx(3 / 40)
    }


def test_log_samples_cuts_long_text_with_a_visible_marker(
    service: ServiceProcess, run_id: str, spool_dir: Path
) -> None:
    run = start(run_id, service.url, spool_dir, max_sample_kb=2)
    run.log_samples([{"prompt": "short", "response": "x" * 50_000 + "THE END", "reward": 1}], 0)
    run.finish()
    (sample,) = samples_of(service.url, run_id)["data"]
    assert sample["prompt"] == "short" and sample["cut"] is True
    assert "characters cut]" in sample["response"] and sample["response"].endswith("THE END")
    assert len(sample["response"].encode()) < 2048


def test_log_samples_never_raises_on_junk(
    service: ServiceProcess, run_id: str, spool_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rlguard")
    run = start(run_id, service.url, spool_dir)
    run.log_samples(None)  # type: ignore[arg-type]
    run.log_samples([1, {"response": "ok", "reward": "high"}], step=2)
    run.log_samples([{"response": "bad step"}], step=-3)
    run.log_samples([{"response": "odd tokens", "tokens": "abc", "token_kl": 5}], step=3)
    run.log_samples([{"response": "raises", "reward": Unreadable()}], step=4)
    run.log_samples([{"response": "bad split"}], step=5, split="Val!")
    status = run.finish()
    assert (status.samples_logged, status.samples_dropped, status.samples_sent) == (2, 4, 2)
    ok, odd = samples_of(service.url, run_id, tokens="true")["data"]
    assert (ok["response"], ok["reward"]) == ("ok", None)
    assert odd["tokens"] == {
        "text": ["abc"],
        "kl": [5.0],
        "logprobs": None,
        "entropy": None,
        "ratio": None,
    }
    text = caplog.text
    assert "takes a list of dicts" in text and "'reward' is neither a number nor text" in text
    assert "step must be an int >= 0" in text and "cannot read the samples logged at step 4" in text
    assert "split must be a short lower-case name" in text


class Unreadable:
    """A value whose conversion to a number raises."""

    def item(self) -> float:
        raise RuntimeError("device lost")

    shape = ()
    __module__ = "numpy"


def test_samples_spool_while_the_service_is_down_and_replay_exactly_once(
    proxy: FaultProxy, run_id: str, spool_dir: Path
) -> None:
    proxy.mode = "status:503"
    run = start(run_id, proxy.url, spool_dir, max_samples_per_step=10)
    for step in range(4):
        run.log({"loss": float(step)}, step=step)
        run.log_samples(rollouts(10, step), step=step)
    assert run.flush(10)
    status = run.status()
    # a point per step for the loss, and one for what its samples say (none is degenerate)
    assert (status.spool_samples, status.spool_points, status.samples_sent) == (40, 8, 0)
    proxy.mode = "pass"
    status = run.finish()
    assert (status.samples_replayed, status.spool_samples, status.samples_dropped) == (40, 0, 0)
    assert samples_of(proxy.url, run_id)["count"] == 40
    assert stored_series(proxy.url, run_id) == {
        "loss": {0: 0.0, 1: 1.0, 2: 2.0, 3: 3.0},
        "samples/degenerate_fraction": dict.fromkeys(range(4), 0.0),
    }


def test_sample_flood_with_the_service_down_loses_no_metric_point(
    run_id: str, spool_dir: Path
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    budget = 16
    max_queue_mb = 1.0
    run = start(
        run_id,
        url,
        spool_dir,
        max_samples_per_step=budget,
        max_queue_mb=max_queue_mb,
        flush_interval_s=600,  # the sender drains only when flushed
    )
    steps, keys = 40, 20
    for step in range(steps):
        run.log({f"k{i}": step + i / 100 for i in range(keys)}, step=step)
        run.log_samples(rollouts(10 * budget, step, text_bytes=2000), step=step)
        assert run.status().queued_bytes <= max_queue_mb * 1024 * 1024
    assert run.flush(60)
    status = run.finish(timeout_s=0)
    assert (status.dropped_steps, status.dropped) == (0, 0)
    spooled: dict[str, int] = {}
    for path in (spool_dir / run_id).glob("*-p*.batch"):
        for block in _packed.decode(path.read_bytes())[1]:
            for key in block.keys:
                spooled[key] = spooled.get(key, 0) + len(block.steps)
    assert {key: n for key, n in spooled.items() if key.startswith("k")} == dict.fromkeys(
        (f"k{i}" for i in range(keys)), steps
    )
    assert status.spool_points == sum(spooled.values())
    assert status.samples_dropped > 0  # the queue gave samples up, never a metric step
    accounted = status.samples_logged + status.samples_filtered + status.samples_dropped
    assert accounted == steps * 10 * budget
    assert status.spool_samples == status.samples_logged <= steps * budget


def test_a_resumed_process_replays_only_the_samples_before_its_resume_step(
    service: ServiceProcess, run_id: str, spool_dir: Path
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    first = start(run_id, down, spool_dir)
    for step in range(6):
        first.log_samples(rollouts(4, step), step=step)
    assert first.finish(timeout_s=0).spool_samples == 24
    second = start(run_id, service.url, spool_dir, resume_from_step=2)
    second.log_samples(rollouts(1, 3), step=3)
    status = second.finish()
    delivered = status.samples_replayed + status.samples_sent  # step 3 may queue behind them
    assert (delivered, status.samples_dropped, status.spool_samples) == (12 + 1, 0, 0)
    stored = samples_of(service.url, run_id)["data"]
    assert sorted({(s["step"], s["index"]) for s in stored}) == [
        *((step, i) for step in range(3) for i in range(4)),
        (3, 0),
    ]


def test_cli_sync_replays_spooled_samples(service: ServiceProcess, run_id: str, spool_dir: Path):
    first = start(run_id, f"http://127.0.0.1:{free_port()}", spool_dir)
    first.log_samples(rollouts(5, 0), step=0)
    assert first.finish(timeout_s=0).spool_samples == 5
    from rlguard import cli

    assert cli.main(["sync", "--spool-dir", str(spool_dir), "--url", service.url, run_id]) == 0
    assert samples_of(service.url, run_id)["count"] == 5
    assert not list((spool_dir / run_id).glob("*.batch"))

"""The samples' own signals through the real hook and service: a real demo run whose entropy
bonus breaks its output format, and real model text that loops (docs/detectors-samples.md)."""

from __future__ import annotations

import codecs
import re
import this
from pathlib import Path
from typing import Any

import httpx
import pytest

import rlguard
from rlguard.demo import PRESETS, train
from rlguard.sample_signals import step_signals
from tests.conftest import RunningServer, new_run_id

FAST = {"gpu": False, "flush_interval_s": 0.05}


def _first_steps(url: str, run_id: str) -> dict[str, tuple[int, str]]:
    """Each alert key of the run: (first step, severity)."""
    answer = httpx.get(f"{url}/api/v1/runs/{run_id}/alerts", params={"limit": 200}).json()
    return {a["key"]: (a["first_step"], a["severity"]) for a in answer["data"]}


@pytest.mark.timeout(600)
def test_entropy_gibberish_fires_before_e4_on_the_demo_entropy_bonus_run(
    server: RunningServer, tmp_path: Path
) -> None:
    runs = {}
    for preset, steps in (("entropy-blowup", 40), ("healthy", 25)):
        config = PRESETS[preset].run_config(planned_steps=steps)
        run = rlguard.init(
            project="samples", url=server.url, spool_dir=str(tmp_path), config=config, **FAST
        )
        train(
            preset,
            steps=steps,
            seed=0,
            device="cpu",
            log=lambda metrics, step, r=run: r.log(metrics, step=step),
            log_samples=run.log_samples,
        )
        run.finish()
        runs[preset] = run.id
    blowup = _first_steps(server.url, runs["entropy-blowup"])
    assert blowup["entropy_gibberish"][1] == "critical"
    assert blowup["degenerate_responses"][1] == "critical"
    # the text breaks before the entropy reaches E4's limit (x2 its start)
    assert blowup["entropy_gibberish"][0] < blowup["entropy_blowup"][0]
    healthy = _first_steps(server.url, runs["healthy"])
    quality = {"degenerate_responses", "repetition_loops", "entropy_gibberish", "length_loops"}
    assert not quality & set(healthy)


def _tiny_gpt2_texts() -> tuple[list[str], list[str]]:
    """Responses of a random 2-layer GPT-2 over the words of the Zen of Python: greedy (it
    loops, as greedy decoding does) and sampled (word soup that does not repeat)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    words = sorted(set(re.findall(r"[A-Za-z']+", codecs.decode(this.s, "rot13"))))
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(words),
        n_positions=128,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = GPT2LMHeadModel(config).eval()
    prompts = torch.randint(0, len(words), (16, 4))

    def texts(**sampling: Any) -> list[str]:
        with torch.no_grad():
            out = model.generate(prompts, pad_token_id=0, **sampling)
        return [" ".join(words[i] for i in row[4:]) for row in out.tolist()]

    loops = texts(max_new_tokens=60, do_sample=False)
    fresh = texts(max_new_tokens=20, do_sample=True, temperature=1.0)
    return loops, fresh


@pytest.fixture(scope="module")
def gpt2_texts() -> tuple[list[str], list[str]]:
    return _tiny_gpt2_texts()


def _length_run(url: str, tmp: Path, long_texts: list[str], short_texts: list[str]) -> str:
    """40 steps whose share of long, truncated responses grows from 0 to 0.75, reward flat."""
    run = rlguard.init(project="samples", url=url, spool_dir=str(tmp), **FAST)
    for step in range(40):
        long_share = min(step / 40, 0.75)
        n_long = round(16 * long_share)
        samples = [
            {"response": long_texts[i], "truncated": True, "length": 60.0, "reward": 0.2}
            for i in range(n_long)
        ] + [
            {"response": short_texts[i], "truncated": False, "length": 20.0, "reward": 0.2}
            for i in range(n_long, 16)
        ]
        run.log(
            {
                "actor/entropy": 0.5,
                "critic/score/mean": 0.2 + 0.001 * (step % 3),
                "response_length/mean": sum(s["length"] for s in samples) / 16,
            },
            step=step,
            samples=samples,
        )
    run.finish()
    return run.id


def test_length_loops_name_the_repetition_behind_a_length_rise(
    server: RunningServer, tmp_path: Path, gpt2_texts: tuple[list[str], list[str]]
) -> None:
    loops, fresh = gpt2_texts
    looping = _first_steps(server.url, _length_run(server.url, tmp_path, loops, fresh))
    # the truncation share came from the samples alone: the "trainer" logged no clip ratio
    assert looping["length_loops"][1] == "critical"
    assert looping["repetition_loops"][1] == "warn"
    assert looping["length_loops"][0] < looping["length_blowup"][0]
    # the same rise of length and truncation with text that does not repeat: D8 alone
    unique = [" ".join(f"{w}{i}" for i, w in enumerate(f"{t} {t} {t}".split())) for t in fresh]
    plain = _first_steps(server.url, _length_run(server.url, tmp_path, unique, fresh))
    assert "length_blowup" in plain
    assert not {"length_loops", "repetition_loops"} & set(plain)


SIGNALS = "samples/truncated_fraction,samples/degenerate_fraction,samples/repetition_rate"
SENTENCE = "The answer is 42, since six times seven is 42."


def _late_step_samples(step: int) -> list[dict[str, Any]]:
    """Four samples of ``step``: sound text until step 20, empty responses from then on."""
    return [
        {"response": "" if step >= 20 else SENTENCE, "truncated": float(i == 0)} for i in range(4)
    ]


def _late_samples_run(url: str, lag: int) -> str:
    """A run whose samples (posted to REST, signals derived by the service) come ``lag``
    batches after their step's metrics."""
    run_id = new_run_id("late")
    with httpx.Client(base_url=f"{url}/api/v1", timeout=30) as client:
        assert client.post("/runs", json={"id": run_id, "project": "late"}).status_code == 201
        for step in range(60 + lag):
            if step < 60:
                body = {"batch_id": f"p{step}", "steps": [{"step": step, "values": {"x": 1.0}}]}
                assert client.post(f"/runs/{run_id}/batches", json=body).status_code == 200
            late = step - lag
            if late >= 0:
                samples = [
                    {"step": late, "index": i, **sample}
                    for i, sample in enumerate(_late_step_samples(late))
                ]
                body = {"batch_id": f"s{late}", "samples": samples}
                assert client.post(f"/runs/{run_id}/samples", json=body).status_code == 200
    return run_id


def _stored_signals(url: str, run_id: str) -> dict[str, dict[int, float]]:
    answer = httpx.get(f"{url}/api/v1/runs/{run_id}/series", params={"keys": SIGNALS}).json()
    return {
        key: dict(zip(data["steps"], data["values"], strict=True))
        for key, data in answer["series"].items()
    }


def test_samples_posted_to_rest_get_signals_the_detectors_read(db_server: RunningServer) -> None:
    on_time_id = _late_samples_run(db_server.url, lag=0)
    stored = _stored_signals(db_server.url, on_time_id)
    # derived by the service with the hook's definition, at each sample's own step
    assert stored["samples/degenerate_fraction"] == {s: float(s >= 20) for s in range(60)}
    assert stored["samples/truncated_fraction"] == dict.fromkeys(range(60), 0.25)
    assert step_signals(_late_step_samples(30)) == {
        key: stored[key][30]
        for key in ("samples/degenerate_fraction", "samples/truncated_fraction")
    }
    on_time = _first_steps(db_server.url, on_time_id)
    assert on_time["degenerate_responses"] == (on_time["degenerate_responses"][0], "critical")
    assert on_time["degenerate_responses"][0] >= 20
    late = _first_steps(db_server.url, _late_samples_run(db_server.url, lag=3))
    # three batches late (the step was fed two batches before): seen at the step then
    # pending, three steps after their own, so the alert opens that much later
    assert late["degenerate_responses"][0] == on_time["degenerate_responses"][0] + 3


def _hook_run(url: str, spool_dir: Path, lag: int) -> str:
    """A run logged through the real hook, one sender drain a step (``flush()``), whose
    samples of each step are logged ``lag`` drains after its metrics."""
    run = rlguard.init(
        project="late", url=url, spool_dir=str(spool_dir), gpu=False, flush_interval_s=3600
    )
    for step in range(60 + lag):
        if step < 60:
            run.log({"x": 1.0}, step=step)
        if step >= lag:
            run.log_samples(_late_step_samples(step - lag), step=step - lag)
        assert run.flush(timeout_s=30)
    status = run.finish()
    # x, the degenerate and truncated shares, and the repetition rate of the 20 sound steps
    assert (status.sent, status.samples_sent) == (60 + 60 * 2 + 20, 60 * 4)
    return run.id


@pytest.mark.parametrize("lag", [2, 5])
def test_hook_samples_drains_after_their_metrics_reach_the_detectors(
    server: RunningServer, tmp_path: Path, lag: int
) -> None:
    on_time = _first_steps(server.url, _hook_run(server.url, tmp_path, lag=0))
    late_id = _hook_run(server.url, tmp_path, lag=lag)
    stored = _stored_signals(server.url, late_id)["samples/degenerate_fraction"]
    assert stored == {s: float(s >= 20) for s in range(60)}  # stored at their own steps
    late = _first_steps(server.url, late_id)
    # The step was fed lag - 1 drains before its samples came: they are seen with the step
    # then pending, lag - 1 steps after their own, and the alert opens that much later.
    assert on_time["degenerate_responses"][0] >= 20
    assert late["degenerate_responses"] == (
        on_time["degenerate_responses"][0] + lag - 1,
        "critical",
    )

"""Samples in the hook, pure parts: the sampling policy, the byte budgets, the shared queue."""

from __future__ import annotations

import json
import math
import random
import threading

import numpy as np
import pytest
import torch

from rlguard import _samples
from rlguard._queue import LogQueue, entry_bytes
from rlguard._samples import SampleShaper, cut_middle, fit_texts, select_indices

R = [0.5, 0.9, 0.1, 0.7, 0.3, 0.2, 0.8, 0.4]  # best 0.9 (index 1), worst 0.1 (index 2)


@pytest.mark.parametrize(
    ("rewards", "kls", "budget", "must_keep", "count"),
    [
        (R[:3], [], 8, {0, 1, 2}, 3),  # fits: everything, in order
        (R, [], 0, set(), 0),  # no budget
        (R, [], 4, {1, 2}, 4),  # one best, one worst, two at random
        (R, [], 8, set(range(8)), 8),
        (R, [0.0, 0, 0, 0, 0, 5.0, 0, 0], 4, {1, 2, 5}, 4),  # plus the highest KL
        (R + R, [], 8, {1, 9, 2, 10}, 8),  # ties: both copies of the best and the worst
        ([None] * 8, [], 3, set(), 3),  # no rewards: all at random
        ([math.nan, 1.0, None, 0.0], [], 2, {1, 3}, 2),  # non-finite rewards are not ranked
    ],
)
def test_select_indices_keeps_best_worst_high_kl_then_random(
    rewards: list, kls: list, budget: int, must_keep: set, count: int
) -> None:
    kept = select_indices(rewards, kls, budget, random.Random(0))
    assert kept == sorted(set(kept)) and len(kept) == count
    assert must_keep <= set(kept)


def test_select_indices_is_reproducible_per_seed() -> None:
    rewards = [float(i % 5) for i in range(100)]
    first = select_indices(rewards, [], 10, random.Random(7))
    assert first == select_indices(rewards, [], 10, random.Random(7))


@pytest.mark.parametrize(
    ("text", "budget"),
    [("x" * 10_000, 1000), ("é" * 5000, 700), ("ab" * 300 + "TAIL", 200), ("汉字" * 900, 333)],
)
def test_cut_middle_keeps_head_and_tail_within_the_budget_with_a_marker(
    text: str, budget: int
) -> None:
    cut = cut_middle(text, budget)
    assert len(cut.encode()) <= budget
    assert "[rlguard:" in cut and "characters cut]" in cut
    head, _, rest = cut.partition("\n…[rlguard: ")
    n = int(rest.split(" ", 1)[0])
    tail = rest.split("]…\n", 1)[1]
    assert text.startswith(head) and text.endswith(tail)
    assert len(head) + n + len(tail) == len(text)


def test_cut_middle_leaves_short_text_alone() -> None:
    assert cut_middle("short", 100) == "short"


def test_fit_texts_cuts_the_long_field_and_keeps_the_short_one() -> None:
    texts = {"prompt": "What is 2+2?", "response": "4" * 10_000}
    fitted = fit_texts(texts, 2048)
    assert fitted["prompt"] == texts["prompt"]
    assert sum(len(v.encode()) for v in fitted.values()) <= 2048
    assert "characters cut" in fitted["response"]
    assert fit_texts({"a": "x"}, 10) == {"a": "x"}


def _records(n: int, text_bytes: int = 100) -> list[dict]:
    return [{"prompt": f"p{i}", "response": "r" * text_bytes, "reward": float(i)} for i in range(n)]


def test_shaper_keeps_the_step_budget_across_calls_and_numbers_on() -> None:
    shaper = SampleShaper(max_per_step=6, max_bytes=4096)
    first = shaper.shape(3, 1.0, _records(4))
    second = shaper.shape(3, 2.0, _records(4))
    third = shaper.shape(4, 3.0, _records(2))
    assert [s["index"] for s in first.samples] == [0, 1, 2, 3]
    assert len(second.samples) == 2 and second.filtered == 2
    assert all(4 <= s["index"] < 8 for s in second.samples)
    assert [(s["step"], s["index"]) for s in third.samples] == [(4, 0), (4, 1)]


def test_shaper_reads_numbers_tokens_and_scores_of_every_kind() -> None:
    shaper = SampleShaper(max_per_step=8, max_bytes=32_768)
    record = {
        "prompt": "1+1=",
        "response": b"2<eos>",
        "reward": torch.tensor(1.0),
        "advantage": np.float32(0.5),
        "kl": math.nan,
        "truncated": False,
        "group": 3,
        "reward_format": np.float64(1.0),
        "tokens": torch.tensor([5, 13]),
        "token_logprobs": np.array([-0.1, -2.0], dtype=np.float32),
        "token_kl": [0.01, math.inf],
        "note": object(),
    }
    shaped = shaper.shape(0, 5.0, [record, "not a dict"])
    (sample,) = shaped.samples
    assert sample == {
        "step": 0,
        "index": 0,
        "time": 5.0,
        "prompt": "1+1=",
        "response": "2<eos>",
        "reward": 1.0,
        "advantage": 0.5,
        "kl": None,
        "truncated": 0.0,
        "group": 3.0,
        "length": 2.0,
        "scores": {"reward_format": 1.0},
        "tokens": {
            "text": ["5", "13"],
            "logprobs": [pytest.approx(-0.1), -2.0],
            "kl": [0.01, None],
        },
    }
    assert (shaped.invalid, shaped.skipped_fields) == (1, ["note"])


def test_shaper_fits_a_sample_into_its_byte_budget_with_a_marker() -> None:
    shaper = SampleShaper(max_per_step=8, max_bytes=2048)
    record = {
        "prompt": "q" * 50,
        "response": "é" * 20_000,
        "tokens": ["t"] * 5000,
        "token_kl": [0.5] * 5000,
        "reward": 1.0,
    }
    (sample,) = shaper.shape(0, 0.0, [record]).samples
    encoded = json.dumps(sample, ensure_ascii=False).encode()
    assert len(encoded) <= 2048
    assert sample["cut"] is True and sample["prompt"] == "q" * 50
    assert "characters cut" in sample["response"]
    assert len(sample["tokens"]["text"]) == len(sample["tokens"]["kl"]) < 5000


def test_queue_evicts_samples_before_refusing_a_metric_step() -> None:
    queue = LogQueue(max_bytes=10_000)
    queue.append_samples(("s", 0.0, []), 10, 6_000)
    queue.append_samples(("s", 0.0, []), 10, 5_000)  # does not fit: refused
    assert (queue.dropped_samples, queue.bytes) == (10, 6_000)
    metrics = {f"k{i}": float(i) for i in range(20)}
    fitting = 10_000 // entry_bytes(metrics)
    for step in range(fitting + 3):
        queue.append((step, 0.0, metrics))
    assert queue.dropped_samples == 20  # the queued samples made room first
    assert queue.dropped_steps == 3 and len(queue) == fitting
    queue.append(object())  # a flush marker always gets in
    entries, sample_entries = queue.take()
    assert len(entries) == fitting + 1 and sample_entries == []
    assert queue.bytes == fitting * entry_bytes(metrics)  # the sender holds them still
    queue.release()
    assert queue.bytes == 0


def test_queue_counts_entries_from_log_and_from_other_threads_in_one_budget() -> None:
    metrics = {f"k{i}": float(i) for i in range(20)}
    queue = LogQueue(max_bytes=3 * entry_bytes(metrics))
    system = threading.Thread(target=queue.append_locked, args=((0, 0.0, metrics),))
    system.start()
    system.join(timeout=10)
    queue.append((1, 0.0, metrics))
    queue.append((2, 0.0, metrics))
    queue.append((3, 0.0, metrics))  # over the budget: refused under the lock
    assert (len(queue), queue.dropped_steps, queue.bytes) == (3, 1, 3 * entry_bytes(metrics))
    entries, _ = queue.take()
    assert [entry[0] for entry in entries] == [0, 1, 2]
    queue.append((4, 0.0, metrics))  # taken but not released: still in the budget
    assert (len(queue), queue.dropped_steps) == (0, 2)
    queue.release()
    assert queue.bytes == 0
    queue.append((5, 0.0, metrics))
    assert queue.bytes == entry_bytes(metrics)


def test_queue_charges_taken_samples_until_the_sender_releases_them() -> None:
    queue = LogQueue(max_bytes=10_000)
    queue.append_samples(("s", 0.0, []), 4, 7_000)
    _, taken = queue.take()
    assert taken == [("s", 0.0, [])] and queue.bytes == 7_000
    queue.append_samples(("s", 1.0, []), 4, 5_000)  # the held 7,000 leave no room for it
    assert queue.dropped_samples == 4
    queue.release()
    queue.append_samples(("s", 2.0, []), 4, 5_000)
    assert (queue.bytes, queue.dropped_samples) == (5_000, 4)


def test_snapshot_copies_the_records_and_sizes_text_and_arrays() -> None:
    logged = _records(1, 10)
    records, small = _samples.snapshot(logged)
    assert records == logged and records[0] is not logged[0]
    logged[0]["response"] = "changed"
    assert records[0]["response"] == "r" * 10
    large = _samples.snapshot(_records(1, 10_000))[1]
    arrays = _samples.snapshot([{"token_kl": np.zeros(1000)}])[1]
    assert large - small == 10_000 - 10 and arrays == _samples.RECORD_BYTES + 32 + 80 + 8000


def test_snapshot_charges_of_many_calls_add_up_to_what_they_hold() -> None:
    # one large record among 64, at a position the first call's spread misses
    logged = _records(64, 100)
    logged[5]["response"] = "r" * 100_000
    exact = sum(map(_samples.record_bytes, logged))
    first = _samples.snapshot(logged, call=0)[1]
    assert first < exact / 2  # one call alone can miss it...
    charged = sum(_samples.snapshot(logged, call=call)[1] for call in range(800))
    assert abs(charged / 800 - exact) / exact < 0.01  # ...the calls together do not


def test_snapshot_copies_other_mappings_and_keeps_the_rest_for_the_sender() -> None:
    import types

    logged = [types.MappingProxyType({"response": "x"}), "not a record", {"reward": 1.0}]
    records, size = _samples.snapshot(logged)
    assert records == [{"response": "x"}, "not a record", {"reward": 1.0}]
    assert type(records[0]) is dict and size > 0

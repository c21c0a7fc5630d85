"""Rollout samples: the budgets, the per-step sampling policy and the wire encoding.

``Run.log_samples`` only copies the records; the sender thread turns them into wire samples
here: it reads every number of a call in one ``_wire.convert_values`` (one transfer per device),
keeps at most ``max_samples_per_step`` per step (the best, the worst and the highest-KL by
reward and KL, then a random few) and fits each kept sample into ``max_sample_bytes``, text cut
in the middle behind a visible marker. Mirrors ``rlguard_backend.schemas.SampleBatchIn``.
"""

from __future__ import annotations

import gzip
import json
import math
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from rlguard import _wire
from rlguard.protocol import from_wire

TEXT_FIELDS = ("prompt", "response", "reference", "ground_truth")
NUMBER_FIELDS = ("reward", "advantage", "length", "truncated", "group", "logprob", "entropy", "kl")
# logged name -> name inside the wire sample's "tokens" object
TOKEN_FIELDS = {
    "tokens": "text",
    "token_logprobs": "logprobs",
    "token_entropy": "entropy",
    "token_kl": "kl",
    "token_ratio": "ratio",
}
MAX_SCORES = 32  # extra numbers (reward components) kept per sample
TRUNCATION_MARKER = "\n…[rlguard: {n} characters cut]…\n"
TOKEN_ITEM_BYTES = 12  # a JSON number with its comma, roughly
RECORD_BYTES = 232  # a small dict plus the queue entry around it
SIZED_RECORDS = 8  # records of a log_samples() call sized on the training thread
SAMPLES_PER_BATCH = 512
TRAIN = "train"
SPLIT_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,31}$")  # backend schemas.SampleSplit
_SCALARS = (float, int, bool)


def snapshot(samples: Iterable[Any], call: int = 0) -> tuple[list[Any], int]:
    """Shallow copies of the logged records and about the bytes they hold, for the queue's
    budget. Copying is the training thread's whole per-record work: up to ``SIZED_RECORDS``
    records, spread over the call (where the spread starts turns with ``call``), are sized and
    every record is charged their mean, so the charges of many calls add up to what they hold.
    """
    records = list(samples)
    try:
        records = list(map(dict.copy, records))
    except TypeError:  # not all plain dicts: other mappings are copied too, the rest kept
        records = [dict(r) if isinstance(r, Mapping) else r for r in records]
    if not records:
        return records, 0
    stride = max(len(records) // SIZED_RECORDS, 1)
    sized = records[call % stride :: stride][:SIZED_RECORDS]
    return records, sum(map(record_bytes, sized)) * len(records) // len(sized)


def record_bytes(record: Any) -> int:
    """About the bytes one logged record holds: its text, its arrays, a few per number."""
    total = RECORD_BYTES
    for value in record.values() if type(record) is dict else ():
        if type(value) is str:
            total += 49 + len(value)
        elif type(value) not in _SCALARS:
            total += 32 + _value_bytes(value)
        else:
            total += 32
    return total


def _value_bytes(value: Any) -> int:
    nbytes = getattr(value, "nbytes", None)  # numpy arrays and torch tensors
    if isinstance(nbytes, int):
        return 80 + nbytes
    if isinstance(value, (list, tuple)):
        return 24 + 40 * len(value)
    return 0


def select_indices(
    rewards: Sequence[float | None],
    kls: Sequence[float | None],
    budget: int,
    rng: random.Random,
) -> list[int]:
    """Which of ``len(rewards)`` samples to keep, ascending: all of them when they fit, else a
    quarter each of the best and worst rewards and (when given) of the highest KL, the rest at
    random."""
    n = len(rewards)
    if n <= budget:
        return list(range(n))
    if budget <= 0:
        return []
    kept: list[int] = []
    quarter = max(budget // 4, 1)
    ranked = sorted((r, i) for i, r in enumerate(rewards) if r is not None and math.isfinite(r))
    by_kl = sorted((-k, i) for i, k in enumerate(kls) if k is not None and math.isfinite(k))
    for group in ([i for _, i in ranked[::-1]], [i for _, i in ranked], [i for _, i in by_kl]):
        _take(kept, group, min(quarter, budget - len(kept)))
    rest = sorted(set(range(n)) - set(kept))
    kept += rng.sample(rest, budget - len(kept))
    return sorted(kept)


def _take(kept: list[int], ranked: list[int], count: int) -> None:
    """Append the first ``count`` indices of ``ranked`` not kept yet."""
    chosen = set(kept)
    for index in ranked:
        if count <= 0:
            return
        if index not in chosen:
            kept.append(index)
            chosen.add(index)
            count -= 1


def cut_middle(text: str, max_bytes: int) -> str:
    """``text`` in at most ``max_bytes`` UTF-8 bytes: its head and tail around a marker."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    keep = max(max_bytes - len(TRUNCATION_MARKER.format(n=len(text)).encode()), 0)
    head = data[: keep - keep // 3].decode("utf-8", "ignore")
    tail = data[len(data) - keep // 3 :].decode("utf-8", "ignore") if keep // 3 else ""
    marker = TRUNCATION_MARKER.format(n=len(text) - len(head) - len(tail))
    return head + marker + tail


def fit_texts(texts: dict[str, str], budget_bytes: int) -> dict[str, str]:
    """Texts cut so their UTF-8 bytes total at most ``budget_bytes``: each text gets an equal
    share of what the shorter ones leave, so short texts stay whole and long ones are cut."""
    sizes = {key: len(text.encode()) for key, text in texts.items()}
    if sum(sizes.values()) <= budget_bytes:
        return texts
    out, left = {}, budget_bytes
    ordered = sorted(texts, key=sizes.__getitem__)
    for position, key in enumerate(ordered):
        share = left // (len(ordered) - position)
        out[key] = texts[key] if sizes[key] <= share else cut_middle(texts[key], share)
        left -= len(out[key].encode())
    return {key: out[key] for key in texts}


def token_arrays(record: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The per-token arrays of a record as plain lists (token ids or strings become strings)."""
    arrays: dict[str, list[Any]] = {}
    for name, wire_name in TOKEN_FIELDS.items():
        value = record.get(name)
        if value is None:
            continue
        items = _as_list(value)
        if wire_name == "text":
            arrays[wire_name] = [str(item) for item in items]
        else:
            arrays[wire_name] = [_wire_number(item) for item in items]
    return arrays


def _as_list(value: Any) -> list[Any]:
    if _wire._is_tensor(value):
        value = value.detach()
        if value.is_floating_point():
            value = value.double()
        return list(value.cpu().reshape(-1).tolist())
    tolist = getattr(value, "tolist", None)  # numpy arrays
    if callable(tolist):
        listed = tolist()
        return listed if isinstance(listed, list) else [listed]
    if isinstance(value, (list, tuple)):
        return list(value)
    return list(value) if isinstance(value, Iterable) and not isinstance(value, str) else [value]


def _wire_number(value: Any) -> float | None:
    number = _wire.to_float(value)
    return None if number is None or not math.isfinite(number) else number


def fit_tokens(arrays: dict[str, list[Any]], budget_bytes: int) -> tuple[dict[str, list], bool]:
    """Arrays cut to one common length that fits ``budget_bytes``; True when cut."""
    if not arrays:
        return arrays, False
    per_position = sum(
        len(str(a[0])) + 4 if k == "text" and a else TOKEN_ITEM_BYTES for k, a in arrays.items()
    )
    longest = max(len(a) for a in arrays.values())
    fits = max(budget_bytes // max(per_position, 1), 0)
    if longest <= fits:
        return arrays, False
    return {k: a[:fits] for k, a in arrays.items()}, True


class Shaped(NamedTuple):
    """One log_samples() call in wire samples, and what was left out of it."""

    samples: list[dict]
    filtered: int  # over the step's budget
    invalid: int  # records that are not dicts
    skipped_fields: list[str]  # fields neither text, tokens nor numbers


class SampleShaper:
    """Turns what ``log_samples`` queued into wire samples, keeping the per-step budget.

    Calls for the same step and split share the budget and number their samples on from the
    previous call's, so two calls at one step never overwrite each other.
    """

    def __init__(self, max_per_step: int, max_bytes: int) -> None:
        self.max_per_step = max_per_step
        self.max_bytes = max_bytes
        self._key: tuple[int, str] = (-1, TRAIN)
        self._seen = 0
        self._kept = 0

    def shape(self, step: int, when: float, records: list[Any], split: str = TRAIN) -> Shaped:
        """The wire samples of one call."""
        if (step, split) != self._key:
            self._key, self._seen, self._kept = (step, split), 0, 0
        mappings = [r for r in records if isinstance(r, Mapping)]
        numbers, skipped = read_numbers(mappings)
        rewards = [n.get("reward") for n in numbers]
        kls = [n.get("kl") for n in numbers]
        budget = self.max_per_step - self._kept
        chosen = select_indices(rewards, kls, budget, random.Random(step))
        samples = [
            self._wire_sample(mappings[i], numbers[i], step, self._seen + i, when) for i in chosen
        ]
        self._seen += len(mappings)
        self._kept += len(samples)
        if split != TRAIN:
            for sample in samples:
                sample["split"] = split
        return Shaped(samples, len(mappings) - len(samples), len(records) - len(mappings), skipped)

    def _wire_sample(
        self,
        record: Mapping[str, Any],
        numbers: dict[str, float | None],
        step: int,
        index: int,
        when: float,
    ) -> dict[str, Any]:
        """One sample in at most about ``max_bytes`` of JSON: tokens take half at most, the
        texts share what the rest leaves."""
        sample: dict[str, Any] = {"step": step, "index": index, "time": when}
        sample.update((k, v) for k, v in numbers.items() if k in NUMBER_FIELDS)
        scores = [(k, v) for k, v in numbers.items() if k not in NUMBER_FIELDS]
        if scores:
            sample["scores"] = dict(scores[:MAX_SCORES])
        arrays, tokens_cut = fit_tokens(token_arrays(record), self.max_bytes // 2)
        if arrays:
            sample["tokens"] = arrays
            if "length" not in sample and "text" in arrays and not tokens_cut:
                sample["length"] = float(len(arrays["text"]))
        texts = {k: _text(record[k]) for k in TEXT_FIELDS if record.get(k) is not None}
        room = self.max_bytes - len(json.dumps(sample, ensure_ascii=False)) - 24 * len(texts)
        fitted = fit_texts(texts, max(room, 0))
        sample.update(fitted)
        if tokens_cut or fitted != texts:
            sample["cut"] = True
        return sample


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def read_numbers(records: Sequence[Mapping[str, Any]]) -> tuple[list[dict], list[str]]:
    """Each record's numbers (non-finite become None) and the keys that were not numbers,
    read with one ``convert_values`` call for all records."""
    flat: dict[str, Any] = {}
    for i, record in enumerate(records):
        for key, value in record.items():
            if key not in TEXT_FIELDS and key not in TOKEN_FIELDS and isinstance(key, str):
                flat[f"{i}\x00{key}"] = value
    values, skipped = _wire.convert_values(flat)
    numbers: list[dict[str, float | None]] = [{} for _ in records]
    for flat_key, value in values.items():
        position, key = flat_key.split("\x00", 1)
        number = from_wire(value)
        numbers[int(position)][key] = number if math.isfinite(number) else None
    return numbers, sorted({key.split("\x00", 1)[-1] for key in skipped})


def split_samples(samples: list[dict], max_count: int = SAMPLES_PER_BATCH) -> list[list[dict]]:
    """Consecutive chunks of at most ``max_count`` samples."""
    return [samples[i : i + max_count] for i in range(0, len(samples), max_count)]


def encode_samples(batch_id: str, samples: list[dict]) -> bytes:
    """The gzip-compressed JSON body of ``POST /runs/{id}/samples``; ``signals_logged``: the
    sender logs the steps' sample signals with their metrics, so the service derives none."""
    body = json.dumps(
        {"batch_id": batch_id, "samples": samples, "signals_logged": True},
        allow_nan=False,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return gzip.compress(body.encode(), compresslevel=5)


def decode_samples(body: bytes) -> dict:
    """Inverse of ``encode_samples``."""
    return json.loads(gzip.decompress(body))


def samples_up_to(body: bytes, last_step: int) -> tuple[bytes | None, int]:
    """A samples body without its samples after ``last_step``, and their count (None: none)."""
    return _wire.items_up_to(body, last_step, "samples", decode_samples, encode_samples)

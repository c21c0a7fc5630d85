"""The demo's rollouts as rlguard samples: decoded prompts and responses with their numbers."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

from rlguard import probes
from rlguard.demo.task import VOCAB, AdditionTask

HIDDEN_TOKENS = frozenset({"<bos>", "<pad>"})
ANSWER_FORMAT = re.compile(r"\d{1,2}<eos>")  # digits of the sum, then EOS


@dataclass
class Rollout:
    """One step's sampled batch, as the trainer computed it [B, ...]."""

    operands: torch.Tensor
    prompts: torch.Tensor
    responses: torch.Tensor
    scores: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    old_logp: torch.Tensor
    ref_logp: torch.Tensor
    token_entropy: torch.Tensor


def decode(ids: list[int]) -> str:
    """Token ids as the text a person reads: ``3+4=``, ``7<eos>``."""
    return "".join(VOCAB[i] for i in ids if VOCAB[i] not in HIDDEN_TOKENS)


def to_samples(task: AdditionTask, rollout: Rollout, group_size: int) -> list[dict[str, Any]]:
    """One sample per response, read from the device with one transfer per tensor."""
    token_kl = probes.kl_estimate(rollout.old_logp, rollout.ref_logp, "k3") * rollout.mask
    lengths = rollout.mask.sum(-1)
    per_token = lengths.clamp_min(1.0)
    columns = {
        "prompt": rollout.prompts.tolist(),
        "response": rollout.responses.tolist(),
        "reference": task.answer_ids(rollout.operands.sum(-1)).tolist(),
        "reward": rollout.scores.tolist(),
        "advantage": rollout.advantages.tolist(),
        "length": lengths.tolist(),
        "truncated": (rollout.mask[:, -1] > 0).float().tolist(),
        "logprob": (rollout.old_logp * rollout.mask).sum(-1).tolist(),
        "entropy": ((rollout.token_entropy * rollout.mask).sum(-1) / per_token).tolist(),
        "kl": (token_kl.sum(-1) / per_token).tolist(),
        "token_logprobs": rollout.old_logp.tolist(),
        "token_entropy": rollout.token_entropy.tolist(),
        "token_kl": token_kl.tolist(),
    }
    return [_sample(columns, row, group_size) for row in range(len(rollout.responses))]


def _sample(columns: dict[str, list[Any]], row: int, group_size: int) -> dict[str, Any]:
    length = int(columns["length"][row])
    response = columns["response"][row][:length]
    sample = {key: values[row] for key, values in columns.items()}
    text = decode(response)
    sample.update(
        prompt=decode(columns["prompt"][row]),
        response=text,
        malformed=ANSWER_FORMAT.fullmatch(text) is None,  # the task's format check
        reference=decode(columns["reference"][row]),
        group=row // group_size,
        tokens=[VOCAB[i] for i in response],
    )
    for key in ("token_logprobs", "token_entropy", "token_kl"):
        sample[key] = sample[key][:length]
    return sample

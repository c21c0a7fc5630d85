"""A separate inference engine for the demo's rollouts, and its gap to the trainer (verl's keys).

Real RL stacks sample with an inference engine (vLLM, SGLang) that holds its own copy of the
policy, receives the trainer's weights after every step and often runs in lower precision. The
engine here is such a copy: it samples the rollouts and scores them with its own log-probs; the
trainer recomputes them and the step logs the gap as verl does (``rollout_corr/*``,
``training/rollout_*``). When the weight sync stops (``engine_sync_stops_at``), the engine keeps
sampling from a policy the trainer has left behind.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from rlguard.demo.model import response_logits, token_log_probs

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class InferenceEngine:
    """A frozen copy of the policy in ``dtype``, re-synced from the trainer before each step."""

    def __init__(self, policy: nn.Module, dtype: str, sync_stops_at: int) -> None:
        if dtype not in DTYPES:
            raise ValueError(f"engine_dtype={dtype!r} must be one of {', '.join(DTYPES)}")
        self.model = copy.deepcopy(policy).to(DTYPES[dtype]).eval().requires_grad_(False)
        self.sync_stops_at = sync_stops_at  # the first step that receives no weights; 0: never
        self.step = 0

    @torch.no_grad()
    def receive(self, policy: nn.Module) -> None:
        """The trainer's weights, pushed before the step samples (dropped once the sync broke)."""
        self.step += 1
        if self.sync_stops_at and self.step >= self.sync_stops_at:
            return
        for mine, theirs in zip(self.model.parameters(), policy.parameters(), strict=True):
            mine.copy_(theirs)

    @torch.no_grad()
    def log_probs(
        self, ids: torch.Tensor, responses: torch.Tensor, prompt_len: int
    ) -> torch.Tensor:
        """The engine's log-probabilities of the sampled response tokens [B, R]."""
        return token_log_probs(response_logits(self.model, ids, prompt_len), responses)


def mismatch_metrics(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Trainer vs engine on the sampled tokens, as verl computes them (0-d tensors)."""
    valid = mask.bool()
    log_ratio = old_log_prob - rollout_log_prob
    tokens = mask.sum().clamp_min(1.0)
    per_seq = mask.sum(-1).clamp_min(1.0)
    # verl rollout_corr_helper: k3 of KL(rollout || training) and the sequences' log-ppl gap
    k3 = ((log_ratio.exp() - log_ratio - 1) * mask).sum() / tokens
    log_ppl_diff = ((rollout_log_prob - old_log_prob) * mask).sum(-1) / per_seq
    # verl utils/debug/metrics: probabilities on the valid tokens, their gap and correlation
    actor_probs, rollout_probs = old_log_prob.exp()[valid], rollout_log_prob.exp()[valid]
    probs_diff = (actor_probs - rollout_probs).abs()
    pearson = torch.corrcoef(torch.stack([actor_probs, rollout_probs]))[0, 1]
    pearson = torch.nan_to_num(pearson, nan=1.0)  # both sides constant (a collapsed policy)
    return {
        "rollout_corr/k3_kl": k3,
        "rollout_corr/log_ppl_diff": log_ppl_diff.mean(),
        "rollout_corr/log_ppl_abs_diff": log_ppl_diff.abs().mean(),
        "training/rollout_probs_diff_mean": probs_diff.mean(),
        "training/rollout_probs_diff_max": probs_diff.max(),
        "training/rollout_probs_diff_std": probs_diff.std(),
        "training/rollout_actor_probs_pearson_corr": pearson,
    }

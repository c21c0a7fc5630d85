"""Stability probes for a hand-written PPO/GRPO update, computed from tensors it already has.

Every statistic is a 0-d tensor on the inputs' device, so a training step logs them all with one
host transfer (``torch.stack(list(stats.values())).tolist()``) instead of one sync per number.
Conventions follow verl (``verl/trainer/ppo/core_algos.py``): ``mask`` marks response tokens,
``log_prob``/``old_log_prob``/``ref_log_prob`` are per-token log-probabilities of the sampled
tokens, shaped ``[batch, response_len]``; advantages are ``[batch, response_len]`` or ``[batch]``.

Example, inside a loop that already computes these tensors::

    from rlguard import probes

    ppo = probes.ppo_stats(logp, old_logp, adv, mask, clip_low=0.2, clip_high=0.28)
    kl = probes.masked_mean(probes.kl_estimate(logp, ref_logp, "k3+"), mask)
    entropy = probes.masked_mean(probes.entropy_from_logits(logits), mask)
    loss = ppo.loss + 0.001 * kl
    stats = {"actor/ppo_kl": ppo.ppo_kl, "actor/pg_clipfrac": ppo.clipfrac,
             "actor/entropy": entropy, "actor/kl_loss": kl,
             "probe/cov_logp_adv": probes.cov_logp_adv(logp, adv, mask)}
    run.log(dict(zip(stats, torch.stack([v.detach() for v in stats.values()]).tolist())), step=t)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
KL_KINDS = ("k1", "k2", "k3", "low_var_kl", "k1+", "k2+", "k3+", "low_var_kl+")
ENTROPY_CHUNK_TOKENS = 4096  # rows of logits turned into probabilities at a time
LOG_RATIO_CLAMP = 20.0  # verl clamps log-ratios before exp() so one outlier cannot overflow
LOW_VAR_KL_CLAMP = 10.0  # verl's per-token clamp of low_var_kl
ROLLOUT_TAIL_BAND = (0.9, 1.1)  # the band TRL#6789 counts the tokens outside of
# What rollout_tail returns, in order; rlguard_backend.signals maps each onto a D9 tail signal.
ROLLOUT_TAIL_KEYS = (
    "probe/rollout_ratio_p01",
    "probe/rollout_ratio_p99",
    "probe/rollout_logprob_diff_p99",
    "probe/rollout_logprob_diff_mean",
    "probe/rollout_ratio_outside_band",
)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over the tokens where ``mask`` is set (0-d; 0 when the mask is empty)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp_min(1.0)


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean") -> torch.Tensor:
    """Aggregate per-token ``values`` [B, T] to a 0-d tensor, as verl's ``agg_loss``.

    ``token-mean`` weighs every valid token equally; ``seq-mean-token-mean`` averages each
    sequence first; ``seq-mean-token-sum`` (the per-sequence sum, averaged over sequences) is the
    scale of old TRL's ``objective/kl``.
    """
    mask = mask.to(values.dtype)
    if mode == "token-mean":
        return masked_mean(values, mask)
    token_sum = (values * mask).sum(-1)
    if mode == "seq-mean-token-mean":
        seq_value = token_sum / mask.sum(-1).clamp_min(1.0)
    elif mode == "seq-mean-token-sum":
        seq_value = token_sum
    else:
        raise ValueError(f"loss_agg_mode={mode!r} is not one of {LOSS_AGG_MODES}")
    has_tokens = (mask.sum(-1) > 0).to(values.dtype)
    return (seq_value * has_tokens).sum() / has_tokens.sum().clamp_min(1.0)


@dataclass(frozen=True)
class PPOStats:
    """The clipped PPO loss and the statistics verl logs beside it (all 0-d but ``token_loss``)."""

    loss: torch.Tensor  # aggregated clipped loss, differentiable
    token_loss: torch.Tensor  # [B, T] per-token clipped loss (for Clip-Cov / KL-Cov masking)
    ppo_kl: torch.Tensor  # mean(old_logp - logp): k1 of the current vs behaviour policy, signed
    clipfrac: torch.Tensor  # tokens where the clipped term is active, either side
    clipfrac_low: torch.Tensor  # A < 0 and ratio < 1 - clip_low
    clipfrac_high: torch.Tensor  # A > 0 and ratio > 1 + clip_high
    clipfrac_dual: torch.Tensor  # A < 0 and ratio > clip_c (verl's actor/pg_clipfrac_lower)
    clipped: torch.Tensor  # [B, T] bool: the clipped term is active on this token

    def metrics(self) -> dict[str, torch.Tensor]:
        """The statistics under verl's (and, for the two sides, TRL's) metric keys."""
        return {
            "actor/pg_loss": self.loss.detach(),
            "actor/ppo_kl": self.ppo_kl,
            "actor/pg_clipfrac": self.clipfrac,
            "actor/pg_clipfrac_lower": self.clipfrac_dual,
            "clip_ratio/low_mean": self.clipfrac_low,
            "clip_ratio/high_mean": self.clipfrac_high,
        }


def ppo_stats(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
) -> PPOStats:
    """Dual-clip PPO loss and its statistics, as verl's ``compute_policy_loss_vanilla``."""
    adv = _per_token(advantages, log_prob)
    log_ratio = (log_prob - old_log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = log_ratio.exp()
    unclipped = -adv * ratio
    clipped_term = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss_one_side = torch.maximum(unclipped, clipped_term)
    dual_bound = -adv * clip_c
    negative = adv < 0
    token_loss = torch.where(negative, torch.minimum(dual_bound, loss_one_side), loss_one_side)
    valid = mask.to(log_prob.dtype)
    clipped = clipped_term > unclipped
    loss = aggregate(token_loss, mask, loss_agg_mode)
    with torch.no_grad():
        return PPOStats(
            loss=loss,
            token_loss=token_loss,
            ppo_kl=masked_mean(-log_ratio, valid),
            clipfrac=masked_mean(clipped.to(valid.dtype), valid),
            clipfrac_low=masked_mean((negative & (ratio < 1.0 - clip_low)).to(valid.dtype), valid),
            clipfrac_high=masked_mean(
                ((adv > 0) & (ratio > 1.0 + clip_high)).to(valid.dtype), valid
            ),
            clipfrac_dual=masked_mean(
                (negative & (loss_one_side > dual_bound)).to(valid.dtype), valid
            ),
            clipped=clipped & (mask > 0),
        )


def _per_token(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Broadcast sequence-level advantages [B] to tokens [B, T]."""
    return advantages.unsqueeze(-1).expand_as(like) if advantages.dim() == 1 else advantages


def kl_estimate(
    log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kind: str = "k3"
) -> torch.Tensor:
    """Per-token estimate of KL(π_θ ‖ π_ref) from sampled tokens (Schulman's k1, k2, k3).

    With ℓ = ref_log_prob − log_prob: k1 = −ℓ, k2 = ℓ²/2, k3 = e^ℓ − 1 − ℓ; ``low_var_kl`` is
    verl's k3 with ℓ clamped to ±20 and the result to ±10. A trailing ``+`` is straight-through:
    the value of the named estimator with the gradient of k2, the reverse-KL gradient.
    As losses, k1's expected gradient is zero, k2's is ∇KL(π_θ ‖ π_ref) and k3's is the
    *forward* ∇KL(π_ref ‖ π_θ).
    """
    if kind not in KL_KINDS:
        raise ValueError(f"kind={kind!r} is not one of {KL_KINDS}")
    if kind.endswith("+"):
        value = kl_estimate(log_prob, ref_log_prob, kind[:-1])
        grad = kl_estimate(log_prob, ref_log_prob, "k2")
        return grad - grad.detach() + value.detach()
    ell = ref_log_prob - log_prob
    if kind == "k1":
        return -ell
    if kind == "k2":
        return 0.5 * ell.square()
    if kind == "k3":
        return ell.exp() - 1.0 - ell
    ell = ell.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return (ell.exp() - 1.0 - ell).clamp(-LOW_VAR_KL_CLAMP, LOW_VAR_KL_CLAMP)


def entropy_from_logits(
    logits: torch.Tensor, chunk_tokens: int = ENTROPY_CHUNK_TOKENS
) -> torch.Tensor:
    """Per-position entropy (nats) of softmax(logits) over the last axis: [..., V] -> [...].

    H = logsumexp(z) − Σ softmax(z)·z, computed in float32 on ``chunk_tokens`` rows at a time so
    a 150k-token vocabulary never materialises more than one chunk of probabilities.
    """
    flat = logits.reshape(-1, logits.shape[-1])
    parts = [_entropy_rows(rows) for rows in flat.split(chunk_tokens)]
    entropy = torch.cat(parts) if parts else flat.new_zeros(0, dtype=torch.float32)
    return entropy.reshape(logits.shape[:-1])


def _entropy_rows(rows: torch.Tensor) -> torch.Tensor:
    z = rows.float()
    log_norm = torch.logsumexp(z, dim=-1)
    return log_norm - (torch.softmax(z, dim=-1) * z).sum(-1)


def token_covariance(
    log_prob: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Per-token (A − Ā)(log π − mean log π) over valid tokens [B, T], as verl's Clip-Cov."""
    adv = _per_token(advantages, log_prob)
    logp = log_prob.detach()
    return (adv - masked_mean(adv, mask)) * (logp - masked_mean(logp, mask))


def cov_logp_adv(
    log_prob: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Cov(log π, A) over valid tokens: positive values drive entropy down (Cui et al. 2025)."""
    return masked_mean(token_covariance(log_prob, advantages, mask), mask)


def clip_cov_selection(
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clipped: torch.Tensor | None = None,
    ratio: float = 0.0002,
    cov_lb: float = 1.0,
    cov_ub: float = 5.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Clip-Cov: a random ``ratio`` of valid, unclipped tokens with cov in (lb, ub) -> bool [B, T].

    The loss multiplies these tokens by zero. At least one token is chosen when any qualifies.
    """
    cov = token_covariance(log_prob, advantages, mask)
    candidates = (mask > 0) & (cov > cov_lb) & (cov < cov_ub)
    if clipped is not None:
        candidates &= ~clipped
    index = candidates.flatten().nonzero().squeeze(-1)
    count = max(int(ratio * int(mask.sum())), 1)
    order = torch.randperm(index.numel(), generator=generator, device="cpu").to(index.device)
    chosen = torch.zeros(candidates.numel(), dtype=torch.bool, device=mask.device)
    chosen[index[order[:count]]] = True
    return chosen.reshape(mask.shape)


def kl_cov_selection(
    log_prob: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, ratio: float = 0.0002
) -> torch.Tensor:
    """KL-Cov: the top ``ratio`` of valid tokens by (A − Ā)(log π − mean log π) -> bool [B, T]."""
    cov = token_covariance(log_prob, advantages, mask).masked_fill(mask <= 0, -torch.inf)
    valid = int(mask.sum())
    chosen = torch.zeros(cov.numel(), dtype=torch.bool, device=cov.device)
    if valid:
        chosen[cov.flatten().topk(max(1, int(valid * ratio))).indices] = True
    return chosen.reshape(cov.shape)


def rollout_tail(
    log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    mask: torch.Tensor,
    band: tuple[float, float] = ROLLOUT_TAIL_BAND,
) -> dict[str, torch.Tensor]:
    """The tail of the gap between the trainer's and the inference engine's log-probs of the
    sampled tokens, as 0-d tensors under the keys rlguard reads (``rollout_tail``, D9).

    The per-token ratio is exp(log_prob − rollout_log_prob), π_trainer / π_engine as TRL and
    verl define it; a mean hides its tail (TRL#6789: mean |Δ log p| 0.0007, yet 7.5 % of the
    tokens outside [0.9, 1.1]). Percentiles are nearest-rank over the valid tokens (one
    ``kthvalue`` each, no sort); counting the valid tokens is one host sync. With no valid
    token every value is NaN.

    Example, beside the statistics of the module's example::

        stats.update(probes.rollout_tail(old_logp, rollout_logp, mask))
    """
    low, high = band
    if not 0.0 < low < 1.0 < high:
        raise ValueError(f"band={band!r} must be (low, high) with 0 < low < 1 < high")
    with torch.no_grad():
        diff = (log_prob.detach().float() - rollout_log_prob.detach().float())[mask > 0]
        diff = diff.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        if diff.numel() == 0:
            nan = torch.full((), math.nan, device=log_prob.device)
            return dict.fromkeys(ROLLOUT_TAIL_KEYS, nan)
        gap = diff.abs()
        outside = (diff < math.log(low)) | (diff > math.log(high))
        values = (
            _nearest_rank(diff, 0.01).exp(),
            _nearest_rank(diff, 0.99).exp(),
            _nearest_rank(gap, 0.99),
            gap.mean(),
            outside.float().mean(),
        )
        return dict(zip(ROLLOUT_TAIL_KEYS, values, strict=True))


def _nearest_rank(values: torch.Tensor, quantile: float) -> torch.Tensor:
    """The ceil(quantile·n)-th smallest of 1-d ``values`` (the nearest-rank percentile)."""
    rank = min(max(math.ceil(quantile * values.numel()), 1), values.numel())
    return values.kthvalue(rank).values


class FixedKLController:
    """A constant KL coefficient β (verl ``kl_ctrl.type: fixed``, default 0.001)."""

    def __init__(self, kl_coef: float = 0.001) -> None:
        self.value = kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        """Keep β unchanged."""

    def __repr__(self) -> str:
        return f"FixedKLController(value={self.value:g})"


class AdaptiveKLController:
    """β_next = β·(1 + clip(KL/target − 1, ±0.2)·n/horizon) (Ziegler et al. 2019; verl).

    >>> ctrl = AdaptiveKLController(kl_coef=0.001, target_kl=0.1, horizon=10000)
    >>> ctrl.update(current_kl=0.5, n_steps=1024); round(ctrl.value, 7)
    0.0010205
    """

    def __init__(
        self, kl_coef: float = 0.001, target_kl: float = 0.1, horizon: int = 10000
    ) -> None:
        if target_kl <= 0 or horizon <= 0:
            raise ValueError(f"target_kl={target_kl} and horizon={horizon} must both be > 0")
        self.value = kl_coef
        self.target = target_kl
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move β towards the target by at most 0.2·n_steps/horizon of itself."""
        error = min(max(float(current_kl) / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def __repr__(self) -> str:
        return (
            f"AdaptiveKLController(value={self.value:g}, target={self.target:g}, "
            f"horizon={self.horizon})"
        )


def make_kl_controller(
    kind: str = "fixed", kl_coef: float = 0.001, target_kl: float = 0.1, horizon: int = 10000
) -> FixedKLController | AdaptiveKLController:
    """The controller for verl's ``algorithm.kl_ctrl`` settings (``type`` fixed or adaptive)."""
    if kind == "fixed":
        return FixedKLController(kl_coef)
    if kind == "adaptive":
        return AdaptiveKLController(kl_coef, target_kl, horizon)
    raise ValueError(f"kl_ctrl type={kind!r} must be 'fixed' or 'adaptive'")

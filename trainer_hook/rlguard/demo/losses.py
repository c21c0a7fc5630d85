"""The actor loss of one minibatch: PPO (vanilla, Clip-Cov or KL-Cov), KL loss, entropy bonus."""

from __future__ import annotations

import torch

from rlguard import probes
from rlguard.demo.presets import PresetConfig


def actor_loss(
    cfg: PresetConfig,
    logits: torch.Tensor,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    generator: torch.Generator,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(loss to minimise, 0-d statistics under verl's keys) for one minibatch."""
    ppo = probes.ppo_stats(
        log_prob,
        old_log_prob,
        advantages,
        mask,
        cfg.clip_ratio_low,
        cfg.clip_ratio_high,
        cfg.clip_ratio_c,
        cfg.loss_agg_mode,
    )
    stats = ppo.metrics()
    token_loss = _policy_token_loss(cfg, ppo, log_prob, old_log_prob, advantages, mask, generator)
    loss = probes.aggregate(token_loss, mask, cfg.loss_agg_mode)
    stats["actor/pg_loss"] = loss.detach()
    if cfg.entropy_coeff:
        entropy = probes.aggregate(probes.entropy_from_logits(logits), mask, cfg.loss_agg_mode)
        loss = loss - cfg.entropy_coeff * entropy
    if cfg.kl_placement == "loss":
        kl = probes.kl_estimate(log_prob, ref_log_prob, cfg.kl_estimator)
        kl_loss = probes.aggregate(kl, mask, cfg.loss_agg_mode)
        loss = loss + cfg.kl_coef * kl_loss
        stats["actor/kl_loss"] = kl_loss.detach()
    return loss, stats


def _policy_token_loss(
    cfg: PresetConfig,
    ppo: probes.PPOStats,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    """Per-token policy loss [B, R] of the configured loss mode (verl's registry names)."""
    if cfg.loss_mode == "vanilla":
        return ppo.token_loss
    if cfg.loss_mode == "clip_cov":
        chosen = probes.clip_cov_selection(
            log_prob,
            advantages,
            mask,
            ppo.clipped,
            cfg.clip_cov_ratio,
            cfg.clip_cov_lb,
            cfg.clip_cov_ub,
            generator,
        )
        return ppo.token_loss * (~chosen).to(ppo.token_loss.dtype)
    if cfg.loss_mode == "kl_cov":
        # verl's KL-Cov drops the ratio clip and adds |Δlog π| on the top-covariance tokens
        log_ratio = log_prob - old_log_prob
        adv = advantages.unsqueeze(-1).expand_as(log_prob)
        token_loss = -adv * log_ratio.exp()
        chosen = probes.kl_cov_selection(log_prob, advantages, mask, cfg.kl_cov_ratio)
        return torch.where(chosen, token_loss + cfg.ppo_kl_coef * log_ratio.abs(), token_loss)
    raise ValueError(f"loss_mode={cfg.loss_mode!r} must be vanilla, clip_cov or kl_cov")

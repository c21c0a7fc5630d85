"""The GRPO/PPO loop: sample groups, score, KL, group-normalised advantages, clipped updates."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import torch
from torch import nn

from rlguard import probes
from rlguard.demo import losses
from rlguard.demo.engine import InferenceEngine, mismatch_metrics
from rlguard.demo.model import TinyCausalLM, response_logits, sample, token_log_probs
from rlguard.demo.presets import PresetConfig, resolve
from rlguard.demo.rollouts import Rollout, to_samples
from rlguard.demo.task import RESPONSE_LEN, VOCAB, AdditionTask, pass_at_k, response_mask

LogFn = Callable[[dict[str, float], int], None]
SamplesFn = Callable[[list[dict[str, object]], int], None]
SFT_LR = 1e-2
SFT_BATCH = 128
ACTOR_AUTOCAST = {"float32": None, "float16": torch.float16}


@dataclass
class TrainResult:
    """The per-step metric history of one run (``history[i]`` is step ``i + 1``)."""

    preset: str
    seed: int
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0

    def series(self, key: str) -> list[float]:
        """The values of one key, in step order, over the steps that logged it."""
        return [m[key] for m in self.history if key in m]


@dataclass
class _Run:
    """The state one training loop carries from step to step."""

    cfg: PresetConfig
    task: AdditionTask
    policy: nn.Module
    reference: nn.Module
    optimizer: torch.optim.Optimizer
    kl_ctrl: probes.FixedKLController | probes.AdaptiveKLController
    train_set: torch.Tensor
    heldout: torch.Tensor
    generator: torch.Generator
    val_generator: torch.Generator
    engine: InferenceEngine | None = None  # samples the rollouts when the preset has one
    actor_autocast: torch.dtype | None = None  # the actor's update passes autocast to it
    step: int = 0  # the step being trained, from 1


def resolve_device(device: str = "auto") -> str:
    """``auto`` is CUDA when available, else CPU."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def train(
    preset: str | PresetConfig = "healthy",
    steps: int = 200,
    seed: int = 0,
    device: str = "cpu",
    log: LogFn | None = None,
    log_samples: SamplesFn | None = None,
) -> TrainResult:
    """Pre-train briefly, then run ``steps`` GRPO steps, calling ``log(metrics, step)`` and
    ``log_samples(rollout samples, step)`` each."""
    start = time.perf_counter()
    run = _setup(resolve(preset), seed, resolve_device(device))
    result = TrainResult(preset=run.cfg.name, seed=seed)
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        metrics, rollout = _train_step(run)
        if step == 1 or step % run.cfg.val_every == 0 or step == steps:
            metrics.update(_validate(run))
        metrics["timing_s/step"] = time.perf_counter() - t0
        result.history.append(metrics)
        if log is not None:
            log(metrics, step)
        if log_samples is not None:
            log_samples(to_samples(run.task, rollout, run.cfg.group_size), step)
    result.seconds = time.perf_counter() - start
    return result


def _setup(cfg: PresetConfig, seed: int, device: str) -> _Run:
    if cfg.actor_dtype not in ACTOR_AUTOCAST:
        raise ValueError(f"actor_dtype={cfg.actor_dtype!r} must be one of float32, float16")
    torch.manual_seed(seed)
    if device.startswith("cuda"):  # CPU kernels are deterministic already at a fixed thread count
        torch.use_deterministic_algorithms(True, warn_only=True)
    task = AdditionTask()
    train_set, heldout = task.split()
    max_len = task.prompt_len + RESPONSE_LEN
    policy = TinyCausalLM(len(VOCAB), max_len, **cfg.model).to(device)
    generator = torch.Generator(device).manual_seed(seed)
    _pretrain(policy, task, train_set.to(device), cfg, generator)
    reference = copy.deepcopy(policy).eval().requires_grad_(False)
    return _Run(
        cfg=cfg,
        task=task,
        policy=policy,
        reference=reference,
        optimizer=torch.optim.Adam(policy.parameters(), lr=cfg.lr, fused=True),
        kl_ctrl=probes.make_kl_controller(
            cfg.kl_ctrl_type, cfg.kl_coef, cfg.kl_target, cfg.kl_horizon
        ),
        train_set=train_set.to(device),
        heldout=heldout.to(device),
        generator=generator,
        val_generator=torch.Generator(device).manual_seed(seed + 1),
        engine=(
            InferenceEngine(policy, cfg.engine_dtype, cfg.engine_sync_stops_at)
            if cfg.rollout_engine
            else None
        ),
        actor_autocast=ACTOR_AUTOCAST[cfg.actor_dtype],
    )


def _pretrain(
    policy: nn.Module,
    task: AdditionTask,
    train_set: torch.Tensor,
    cfg: PresetConfig,
    gen: torch.Generator,
) -> None:
    """Supervised warm-up on the format: targets are right only ``sft_p_correct`` of the time."""
    optimizer = torch.optim.Adam(policy.parameters(), lr=SFT_LR, fused=True)
    device = train_set.device
    for _ in range(cfg.sft_steps):
        operands = train_set[
            torch.randint(len(train_set), (SFT_BATCH,), generator=gen, device=device)
        ]
        noise = torch.randint(task.max_sum + 1, (SFT_BATCH,), generator=gen, device=device)
        right = torch.rand(SFT_BATCH, generator=gen, device=device) < cfg.sft_p_correct
        answers = task.answer_ids(torch.where(right, operands.sum(-1), noise)).to(device)
        ids = torch.cat([task.prompt_ids(operands).to(device), answers], dim=1)
        logits = response_logits(policy, ids, task.prompt_len)
        nll = -token_log_probs(logits, answers)
        loss = probes.masked_mean(nll, response_mask(answers))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def _resumed(run: _Run) -> bool:
    """Whether this step trains with the settings the run was resumed with."""
    return bool(run.cfg.resumed_at) and run.step >= run.cfg.resumed_at


def _scheduled_lr(run: _Run) -> float:
    """This step's learning rate, set on the optimizer: ``lr`` (· ``resumed_lr_factor``)."""
    lr = run.cfg.lr * run.cfg.resumed_lr_factor if _resumed(run) else run.cfg.lr
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    return lr


def _train_step(run: _Run) -> tuple[dict[str, float], Rollout]:
    cfg, task, gen = run.cfg, run.task, run.generator
    run.step += 1
    lr = _scheduled_lr(run)
    device = run.train_set.device
    pick = torch.randint(len(run.train_set), (cfg.groups,), generator=gen, device=device)
    operands = run.train_set[pick].repeat_interleave(cfg.group_size, dim=0)
    prompts = task.prompt_ids(operands).to(device)
    sampler = run.policy
    if run.engine is not None:
        run.engine.receive(run.policy)
        sampler = run.engine.model
    responses = sample(sampler, prompts, RESPONSE_LEN, gen, cfg.temperature)
    scores, well_formed = task.score(responses, operands)
    mask = response_mask(responses)
    ids = torch.cat([prompts, responses], dim=1)
    with torch.no_grad():
        old_logits = response_logits(run.policy, ids, task.prompt_len)
        old_logp = token_log_probs(old_logits, responses)
        ref_logp = token_log_probs(response_logits(run.reference, ids, task.prompt_len), responses)
    token_entropy = probes.entropy_from_logits(old_logits)
    stats: dict[str, torch.Tensor] = {}
    if run.engine is not None:  # verl recomputes old_log_prob with the actor, as here
        rollout_logp = run.engine.log_probs(ids, responses, task.prompt_len)
        stats = mismatch_metrics(old_logp, rollout_logp, mask)
    stats |= {
        "actor/entropy": probes.masked_mean(token_entropy, mask),
        "probe/kl_to_ref": probes.masked_mean(probes.kl_estimate(old_logp, ref_logp, "k3"), mask),
        "critic/score/mean": scores.mean(),
        "response/format_ok": well_formed.mean(),
        "response_length/mean": mask.sum(-1).mean(),
        "response_length/clip_ratio": (mask[:, -1] > 0).float().mean(),
    }
    rewards = scores - _reward_kl(run, old_logp, ref_logp, mask, stats)
    advantages, zero_std = _group_advantages(rewards, cfg.group_size)
    stats["critic/rewards/mean"] = rewards.mean()
    stats["frac_reward_zero_std"] = zero_std
    stats["probe/cov_logp_adv"] = probes.cov_logp_adv(old_logp, advantages, mask)
    stats.update(_update(run, ids, responses, old_logp, ref_logp, advantages, mask))
    if cfg.kl_placement == "loss":
        stats["actor/kl_coef"] = torch.tensor(cfg.kl_coef)
    stats["actor/lr"] = torch.tensor(lr)
    rollout = Rollout(
        operands, prompts, responses, scores, advantages, mask, old_logp, ref_logp, token_entropy
    )
    return _to_floats(stats), rollout


def _reward_kl(
    run: _Run,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    stats: dict[str, torch.Tensor],
) -> torch.Tensor | float:
    """β·Σ_t k1_t per sequence when KL is in the reward (verl ``apply_kl_penalty``); else 0."""
    if run.cfg.kl_placement != "reward":
        return 0.0
    kld = probes.kl_estimate(old_logp, ref_logp, "k1") * mask
    beta = run.kl_ctrl.value
    current_kl = (kld.sum(-1) / mask.sum(-1).clamp_min(1.0)).mean()
    stats["actor/reward_kl_penalty"] = current_kl
    stats["actor/reward_kl_penalty_coeff"] = torch.tensor(beta)  # β used this step, pre-update
    run.kl_ctrl.update(float(current_kl), n_steps=len(old_logp))
    return beta * kld.sum(-1)


def _group_advantages(rewards: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: (r − group mean) / (group std + 1e-6), and the share of groups with zero spread."""
    groups = rewards.view(-1, group_size)
    std = groups.std(-1, keepdim=True)
    advantages = (groups - groups.mean(-1, keepdim=True)) / (std + 1e-6)
    return advantages.flatten(), (std.squeeze(-1) < 1e-6).float().mean()


def _update(
    run: _Run,
    ids: torch.Tensor,
    responses: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """``ppo_epochs`` passes over shuffled minibatches; statistics averaged as verl does."""
    cfg, gen = run.cfg, run.generator
    collected: dict[str, list[torch.Tensor]] = {}
    epochs = cfg.resumed_ppo_epochs if _resumed(run) and cfg.resumed_ppo_epochs else cfg.ppo_epochs
    for _ in range(epochs):
        order = torch.randperm(len(ids), generator=gen, device=ids.device)
        for rows in order.chunk(cfg.minibatches):
            with _actor_precision(run, ids.device):
                logits = response_logits(run.policy, ids[rows], run.task.prompt_len)
            logp = token_log_probs(logits, responses[rows])
            loss, stats = losses.actor_loss(
                cfg, logits, logp, old_logp[rows], ref_logp[rows], advantages[rows], mask[rows], gen
            )
            run.optimizer.zero_grad()
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(run.policy.parameters(), cfg.grad_clip)
            stats["actor/grad_norm"] = grad_norm
            if torch.isfinite(grad_norm):  # verl's actor skips the update of a non-finite grad
                run.optimizer.step()
            for key, value in stats.items():
                collected.setdefault(key, []).append(value.detach())
    return {key: torch.stack(values).mean() for key, values in collected.items()}


def _actor_precision(run: _Run, device: torch.device) -> AbstractContextManager[object]:
    """Mixed precision for the actor's update passes when the preset asks for it."""
    if run.actor_autocast is None:
        return nullcontext()
    return torch.autocast(device.type, dtype=run.actor_autocast)


@torch.no_grad()
def _validate(run: _Run) -> dict[str, float]:
    """Held-out pass@1 and pass@k from ``val_samples`` samples per held-out prompt."""
    n = run.cfg.val_samples
    operands = run.heldout.repeat_interleave(n, dim=0)
    prompts = run.task.prompt_ids(operands).to(operands.device)
    responses = sample(run.policy, prompts, RESPONSE_LEN, run.val_generator, run.cfg.temperature)
    correct = run.task.score(responses, operands)[0].view(-1, n).sum(-1).tolist()
    return {
        "val/pass@1": sum(pass_at_k(n, int(c), 1) for c in correct) / len(correct),
        f"val/pass@{n}": sum(pass_at_k(n, int(c), n) for c in correct) / len(correct),
    }


def _to_floats(stats: dict[str, torch.Tensor]) -> dict[str, float]:
    """One host transfer for all statistics of a step."""
    keys = list(stats)
    values = torch.stack([stats[k].float().reshape(()).to("cpu") for k in keys]).tolist()
    return dict(zip(keys, values, strict=True))

"""Demo presets: one training configuration per stability phenomenon, each produced for real."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

# Left out of the run config when the engine is off: the other presets' configs stay as they were.
ENGINE_KNOBS = frozenset({"rollout_engine", "engine_dtype", "engine_sync_stops_at"})
# Left out of the run config while at their defaults, for the same reason.
RESUME_KNOBS = frozenset({"actor_dtype", "resumed_at", "resumed_lr_factor", "resumed_ppo_epochs"})


@dataclass(frozen=True)
class PresetConfig:
    """Everything one demo run needs; names follow verl's configuration where one exists."""

    name: str = "custom"
    description: str = ""
    lr: float = 1e-3
    actor_dtype: str = "float32"  # float32 | float16: autocast of the actor's update passes
    # A run resumed with other settings: from step resumed_at on, lr · resumed_lr_factor and
    # resumed_ppo_epochs (0: ppo_epochs) epochs per batch. 0: never.
    resumed_at: int = 0
    resumed_lr_factor: float = 1.0
    resumed_ppo_epochs: int = 0
    ppo_epochs: int = 2
    minibatches: int = 2  # updates per batch = ppo_epochs · minibatches; > 1 so ratio ≠ 1
    groups: int = 8  # prompts per step
    group_size: int = 8  # responses per prompt (GRPO group)
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    loss_agg_mode: str = "token-mean"
    loss_mode: str = "vanilla"  # vanilla | clip_cov | kl_cov
    clip_cov_ratio: float = 0.02  # verl: 0.0002 (of ~10⁶ tokens); a demo batch has ~400
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.02
    ppo_kl_coef: float = 1.0
    kl_placement: str = "none"  # reward | loss | none
    kl_estimator: str = "k3+"  # loss: k1 k2 k3 k3+ low_var_kl; reward: k1
    kl_coef: float = 0.0
    kl_ctrl_type: str = "fixed"  # fixed | adaptive (reward placement)
    kl_target: float = 0.1
    kl_horizon: int = 10000
    entropy_coeff: float = 0.0
    grad_clip: float = 1.0
    temperature: float = 1.0
    sft_steps: int = 100  # deterministic supervised warm-up on the task format
    sft_p_correct: float = 0.5  # share of warm-up targets that are the right sum
    rollout_engine: bool = False  # sample with a separate inference engine (demo/engine.py)
    engine_dtype: str = "float32"  # float32 | bfloat16
    engine_sync_stops_at: int = 0  # first step whose weights never reach the engine; 0: never
    val_every: int = 10
    val_samples: int = 8  # samples per held-out prompt: pass@1 and pass@val_samples
    model: dict[str, int] = field(default_factory=lambda: {"d_model": 32, "layers": 2})

    @property
    def sequences_per_step(self) -> int:
        """Responses sampled per step: groups × group size."""
        return self.groups * self.group_size

    def run_config(self, planned_steps: int) -> dict[str, Any]:
        """The flat run context the rlguard detectors read (plus every knob, for the record)."""
        context = {
            "preset": self.name,
            "updates_per_batch": self.ppo_epochs * self.minibatches,
            "sequences_per_step": self.sequences_per_step,
            "reward_min": 0.0,
            "reward_max": 1.0,
            "planned_steps": planned_steps,
            # A 2-layer policy on 64 sequences per step moves further per update than an LLM:
            # its per-update KL budget (the detectors' kappa, 0.01 for LLMs) is wider.
            "ppo_kl_target": 0.05,
        }
        hidden = {"name", "description", "model"} | (set() if self.rollout_engine else ENGINE_KNOBS)
        hidden |= {k for k in RESUME_KNOBS if getattr(self, k) == getattr(DEFAULT, k)}
        knobs = {k: v for k, v in asdict(self).items() if k not in hidden}
        return {**knobs, **context}


DEFAULT = PresetConfig()
PRESETS: dict[str, PresetConfig] = {
    p.name: p
    for p in [
        PresetConfig(
            name="healthy",
            description="k3+ KL loss, KL-Cov: reward rises, KL settles, entropy declines gently",
            # One epoch of two minibatches: two updates per batch keep single updates small
            # (with four, one step in 200 moved the policy ×11-14 its usual KL). 16 prompts and a
            # warm-up that is right 70 % of the time give a reward the policy can follow, and
            # β = 1.75 makes the KL settle (≈0.045) within ~50 steps instead of creeping up for
            # 200 while the reward plateaus. β sits inside a narrow band (seeds 0-9, 200 steps):
            # 1.5 let one seed's KL cross 0.05 still growing ×1.5 (kl_runaway), 2.0 held one
            # seed's reward back (kl_penalty_strong); 1.75 kept all ten clean.
            lr=2e-3,
            ppo_epochs=1,
            groups=16,
            sft_p_correct=0.7,
            kl_placement="loss",
            kl_estimator="k3+",
            kl_coef=1.75,
            loss_mode="kl_cov",
        ),
        PresetConfig(
            name="collapse",
            description="lr too high, many epochs, no KL: entropy collapses, reward stalls",
            lr=1e-2,
            ppo_epochs=4,
            clip_ratio_high=10.0,
        ),
        PresetConfig(
            name="runaway-kl",
            description=(
                "a policy too small to learn the sums, under verl's default KL loss (low_var_kl, "
                "0.001): reward stays flat while KL to the reference keeps climbing"
            ),
            # With d = 32 the policy learns: KL rises with the reward and settles (≈0.4), which
            # is no runaway. With d = 8 updates buy no reward; the policy drifts onto a few
            # answers given to every prompt (huggingface/trl#204: "same output for every
            # query") and a 0.001 penalty does not hold it.
            kl_placement="loss",
            kl_estimator="low_var_kl",
            kl_coef=0.001,
            model={"d_model": 8, "layers": 2},
        ),
        PresetConfig(
            name="kl-too-strong",
            description="in-reward KL with a large fixed β: KL pinned near zero, reward flat",
            kl_placement="reward",
            kl_estimator="k1",
            kl_coef=2.0,
        ),
        PresetConfig(
            name="entropy-blowup",
            description="entropy bonus 0.3: policy drifts to uniform, output format breaks",
            entropy_coeff=0.3,
        ),
        PresetConfig(
            name="adaptive-kl",
            description="in-reward KL with verl's adaptive controller holding KL near its target",
            # lr 3e-3 with four updates per batch moved the policy past 1.5x its per-update KL
            # budget in single steps; lr 1e-3, two updates and 16 prompts per step do not. The
            # horizon doubles with the sequences per step (128), keeping the controller's
            # largest step at 0.2 * 128 / 400 = 6.4 % per step.
            lr=1e-3,
            ppo_epochs=1,
            groups=16,
            sft_p_correct=0.7,
            kl_placement="reward",
            kl_estimator="k1",
            kl_coef=0.5,
            kl_ctrl_type="adaptive",
            kl_target=0.1,
            kl_horizon=400,
        ),
        PresetConfig(
            name="rollout-mismatch",
            description=(
                "a BF16 inference engine samples the rollouts; from step 30 its weight sync "
                "stops and the trainer updates on a stale policy's samples"
            ),
            # The engine is a BF16 copy of the policy, synced before every step: its log-probs
            # differ from the trainer's FP32 ones by ~1e-5 nats/token (k3), as a vLLM BF16
            # engine does. From step 30 it receives no weights (a broken sync): the trainer
            # moves on while the engine samples from the step-29 policy, so the gap grows
            # x100+ within a few steps and the run drifts onto samples it would not draw.
            rollout_engine=True,
            engine_dtype="bfloat16",
            engine_sync_stops_at=30,
        ),
        PresetConfig(
            name="clip-saturation",
            description=(
                "one update epoch over two minibatches, resumed at step 40 with 16 epochs: "
                "32 updates per batch push a tenth to a quarter of the tokens past the clip"
            ),
            # Two updates per batch keep the clip fraction near 0 (median 0 over steps 10-30),
            # so the warn level is its 0.05 floor. From step 40 each batch is reused 16 times:
            # the clip fraction sits at 0.1-0.3 while entropy stays near 0.5 (at lr 1e-3 the
            # policy does not collapse, which ended the clipping of 8 x 8 updates per batch
            # from step 1 inside the detectors' warm-up).
            ppo_epochs=1,
            resumed_at=40,
            resumed_ppo_epochs=16,
        ),
        PresetConfig(
            name="fp16-overflow",
            description=(
                "the actor's updates run under fp16 autocast; resumed at step 40 with the "
                "learning rate x10^4 (10, not 1e-3), it overflows fp16's 65,504"
            ),
            # Adam moves each weight by up to about lr per update: one update at lr 10 moves
            # weights of size ~0.1-1 by ~10, the next minibatch's fp16 forward pass overflows to
            # inf and the loss, the gradient and its norm are NaN. The actor skips an update whose
            # gradient is not finite (as verl's does), so the run goes on and keeps
            # overflowing. lr x10^3 overflowed on 1 seed of 2; the other collapsed first.
            actor_dtype="float16",
            resumed_at=40,
            resumed_lr_factor=1e4,
        ),
    ]
}

PRESETS["kl-pinned"] = replace(
    PRESETS["adaptive-kl"],
    name="kl-pinned",
    description=(
        "in-reward KL under verl's adaptive controller with a target (0.03) below where the "
        "reward pulls the policy: beta grows x10 at the controller's maximum rate"
    ),
    # The reward pulls the policy to an in-reward KL of ~0.05-0.2 nats/token; a target of 0.03
    # stays below it, so the error sits at its +0.2 clip. 16 prompts (n = 128 sequences) and a
    # horizon of 200 allow 0.2 * 128 / 200 = 12.8 % per step: beta x10 within ~20 saturated
    # steps while KL stays above 1.2x target (within 5x of it, so it does not read as a
    # per-sequence vs per-token mix-up). Only near beta = 2 (x40) does the penalty bring KL
    # down to the target.
    ppo_epochs=2,
    sft_p_correct=0.5,
    kl_coef=0.05,
    kl_target=0.03,
    kl_horizon=200,
)

# Presets made to raise one detector each (docs/detectors.md pictures their alerts), trained by
# name; `--preset all` (make demo) trains the others.
DETECTOR_PRESETS = ("kl-pinned", "rollout-mismatch")
# The same, for runs resumed at step 40 with a setting that breaks them (pinned in
# tests/demo/test_demo_alert_pictures.py, over only the steps their alerts need).
RESUMED_PRESETS = ("clip-saturation", "fp16-overflow")
ALL = tuple(name for name in PRESETS if name not in DETECTOR_PRESETS + RESUMED_PRESETS)


def resolve(preset: str | PresetConfig, **overrides: Any) -> PresetConfig:
    """A preset by name (or as given), with field overrides applied."""
    if isinstance(preset, PresetConfig):
        return replace(preset, **overrides)
    if preset not in PRESETS:
        raise ValueError(f"preset={preset!r} is not one of {', '.join(PRESETS)} (or 'all')")
    return replace(PRESETS[preset], **overrides)

"""PPO statistics, masked aggregation, the covariance probe, Clip-Cov/KL-Cov and KL controllers."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from rlguard import probes  # noqa: E402

# one sequence of six tokens, the last masked out; ratios chosen to hit every clip region
RATIOS = [1.0, 1.5, 0.5, 0.5, 4.0, 9.0]
ADVANTAGES = [1.0, 1.0, -1.0, 1.0, -1.0, -1.0]
MASK = [1, 1, 1, 1, 1, 0]


def _ppo_inputs() -> tuple[torch.Tensor, ...]:
    old = torch.full((1, 6), -1.0)
    logp = (old + torch.tensor([RATIOS]).log()).requires_grad_(True)
    return logp, old, torch.tensor([ADVANTAGES]), torch.tensor([MASK])


def test_ppo_stats_clip_fractions_by_region() -> None:
    logp, old, adv, mask = _ppo_inputs()
    stats = probes.ppo_stats(logp, old, adv, mask, clip_low=0.2, clip_high=0.28, clip_c=3.0)
    # token 1: A>0, ratio 1.5 > 1.28 (upper); token 2: A<0, ratio 0.5 < 0.8 (lower);
    # token 3: A>0 ratio 0.5: unclipped; token 4: A<0, ratio 4 > c: only the dual clip acts
    # (for A<0 a large ratio is never clipped one-sided, which is why dual-clip exists)
    assert stats.clipfrac.item() == pytest.approx(2 / 5)
    assert stats.clipfrac_high.item() == pytest.approx(1 / 5)
    assert stats.clipfrac_low.item() == pytest.approx(1 / 5)
    assert stats.clipfrac_dual.item() == pytest.approx(1 / 5)
    assert stats.clipped.tolist() == [[False, True, True, False, False, False]]


def test_ppo_stats_loss_matches_hand_computed_dual_clip_loss() -> None:
    logp, old, adv, mask = _ppo_inputs()
    stats = probes.ppo_stats(logp, old, adv, mask, clip_low=0.2, clip_high=0.28, clip_c=3.0)
    # per token: -1, -1.28, 0.8 (clipped at 0.8), -0.5, 3.0 (dual bound)
    expected = [-1.0, -1.28, 0.8, -0.5, 3.0]
    assert stats.token_loss[0, :5].tolist() == pytest.approx(expected)
    assert stats.loss.item() == pytest.approx(sum(expected) / 5)
    stats.loss.backward()
    # clipped tokens carry no gradient; unclipped ones carry -A·ratio/5
    assert logp.grad is not None
    assert logp.grad[0].tolist() == pytest.approx([-0.2, 0.0, 0.0, -0.1, 0.0, 0.0])


def test_ppo_stats_ppo_kl_is_signed_k1_against_old_policy() -> None:
    old = torch.log(torch.tensor([[0.2, 0.5]]))
    logp = torch.log(torch.tensor([[0.4, 0.5]]))  # the sampled token got more likely
    stats = probes.ppo_stats(logp, old, torch.ones(1), torch.ones(1, 2))
    assert stats.ppo_kl.item() == pytest.approx(-math.log(2) / 2)


def test_ppo_stats_ratio_one_gives_zero_clip_and_kl() -> None:
    logp = torch.randn(4, 3)
    stats = probes.ppo_stats(logp, logp.clone(), torch.randn(4), torch.ones(4, 3))
    for value in stats.metrics().values():
        assert value.dim() == 0
    assert stats.clipfrac.item() == 0.0 and stats.ppo_kl.item() == 0.0


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("token-mean", 10 / 4), ("seq-mean-token-mean", (2.0 + 4.0) / 2), ("seq-mean-token-sum", 5.0)],
)
def test_aggregate_modes(mode: str, expected: float) -> None:
    values = torch.tensor([[1.0, 2.0, 3.0, 99.0], [4.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    assert probes.aggregate(values, mask, mode).item() == pytest.approx(expected)


def test_aggregate_unknown_mode_raises() -> None:
    with pytest.raises(ValueError, match="token-mean"):
        probes.aggregate(torch.zeros(1, 1), torch.ones(1, 1), "seq-sum-of-squares")


def test_masked_mean_empty_mask_is_zero() -> None:
    assert probes.masked_mean(torch.ones(2, 2), torch.zeros(2, 2)).item() == 0.0


def test_cov_logp_adv_equals_population_covariance_over_valid_tokens() -> None:
    gen = torch.Generator().manual_seed(0)
    logp, adv = -torch.rand(3, 4, generator=gen), torch.randn(3, generator=gen)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    valid = mask.bool()
    x, y = logp[valid], adv[:, None].expand(3, 4)[valid]
    expected = ((x - x.mean()) * (y - y.mean())).mean()
    assert probes.cov_logp_adv(logp, adv, mask).item() == pytest.approx(expected.item(), rel=1e-5)


def test_cov_logp_adv_positive_when_likely_tokens_are_rewarded() -> None:
    logp = torch.tensor([[-0.1, -0.1], [-3.0, -3.0]])
    assert probes.cov_logp_adv(logp, torch.tensor([1.0, -1.0]), torch.ones(2, 2)).item() > 0


def test_clip_cov_selection_only_unclipped_tokens_inside_bounds() -> None:
    logp = torch.tensor([[-0.1, -0.2, -0.3, -4.0], [-4.0, -4.0, -0.1, -0.3]])
    adv = torch.tensor([[3.0, 3.0, 3.0, 3.0], [-3.0, -3.0, -3.0, -3.0]])
    mask = torch.ones(2, 4)
    cov = probes.token_covariance(logp, adv, mask)
    clipped = torch.zeros(2, 4, dtype=torch.bool)
    clipped[0, 0] = True
    chosen = probes.clip_cov_selection(logp, adv, mask, clipped, ratio=0.5, cov_lb=1.0, cov_ub=5.0)
    allowed = (cov > 1.0) & (cov < 5.0) & ~clipped
    assert int(allowed.sum()) == 2  # two in (1, 5) unclipped; two above the upper bound
    assert int(chosen.sum()) == 2  # max(int(0.5 * 8), 1) = 4 wanted, only 2 qualify
    assert not (chosen & ~allowed).any()


def test_kl_cov_selection_picks_top_covariance_tokens() -> None:
    logp = torch.tensor([[-0.1, -0.5, -2.0], [-3.0, -0.2, -1.0]])
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    chosen = probes.kl_cov_selection(logp, adv, mask, ratio=0.4)
    cov = probes.token_covariance(logp, adv, mask).masked_fill(mask == 0, -1e9)
    assert int(chosen.sum()) == 2
    assert set(chosen.flatten().nonzero().flatten().tolist()) == set(
        cov.flatten().topk(2).indices.tolist()
    )


def test_adaptive_kl_controller_follows_verl_law_with_clipped_error() -> None:
    ctrl = probes.AdaptiveKLController()  # verl defaults: 0.001, target 0.1, horizon 10000
    assert (ctrl.value, ctrl.target, ctrl.horizon) == (0.001, 0.1, 10000)
    ctrl.update(current_kl=1.0, n_steps=1024)  # error clipped to +0.2: +2.048 %
    assert ctrl.value == pytest.approx(0.001 * 1.02048)
    ctrl.update(current_kl=0.09, n_steps=1000)  # error -0.1: -1 %
    assert ctrl.value == pytest.approx(0.001 * 1.02048 * 0.99)


def test_fixed_kl_controller_never_changes() -> None:
    ctrl = probes.make_kl_controller("fixed", kl_coef=0.05)
    ctrl.update(current_kl=10.0, n_steps=1000)
    assert isinstance(ctrl, probes.FixedKLController) and ctrl.value == 0.05


def test_make_kl_controller_unknown_type_raises() -> None:
    with pytest.raises(ValueError, match="adaptive"):
        probes.make_kl_controller("pid")

"""The mathematics of the KL estimators, the entropy mechanism and the KL-regularised optimum.

Each identity is checked by exact enumeration over a small categorical distribution: the
"expected loss" weighs every outcome by its (detached) sampling probability, which is what a large
batch of sampled tokens converges to (seed 002, §10.3 and §10.6).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rlguard import probes  # noqa: E402

K = 6


def _policy_and_reference(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    theta = torch.randn(K, generator=gen, dtype=torch.float64).requires_grad_(True)
    ref_logp = torch.log_softmax(torch.randn(K, generator=gen, dtype=torch.float64), -1)
    return theta, ref_logp


def _expected_loss_grad(theta: torch.Tensor, ref_logp: torch.Tensor, kind: str) -> torch.Tensor:
    logp = torch.log_softmax(theta, -1)
    weights = logp.exp().detach()
    loss = (weights * probes.kl_estimate(logp, ref_logp, kind)).sum()
    return torch.autograd.grad(loss, theta)[0]


def _kl_grads(theta: torch.Tensor, ref_logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    logp = torch.log_softmax(theta, -1)
    reverse = (logp.exp() * (logp - ref_logp)).sum()
    forward = (ref_logp.exp() * (ref_logp - logp)).sum()
    grad_reverse = torch.autograd.grad(reverse, theta, retain_graph=True)[0]
    return grad_reverse, torch.autograd.grad(forward, theta)[0]


def test_kl_estimate_k1_expected_loss_gradient_is_zero() -> None:
    theta, ref_logp = _policy_and_reference()
    grad = _expected_loss_grad(theta, ref_logp, "k1")
    assert grad.abs().max().item() < 1e-12


@pytest.mark.parametrize(("kind", "direction"), [("k2", 0), ("k3", 1), ("k3+", 0)])
def test_kl_estimate_expected_loss_gradient_matches_kl_direction(kind: str, direction: int) -> None:
    theta, ref_logp = _policy_and_reference()
    reverse, forward = _kl_grads(theta, ref_logp)
    target, other = (reverse, forward) if direction == 0 else (forward, reverse)
    grad = _expected_loss_grad(theta, ref_logp, kind)
    assert torch.allclose(grad, target, atol=1e-12)
    assert (grad - other).norm() > 0.1 * other.norm()  # the two directions really differ here


def test_kl_estimate_k3_plus_has_k3_value() -> None:
    theta, ref_logp = _policy_and_reference(1)
    logp = torch.log_softmax(theta, -1)
    plus = probes.kl_estimate(logp, ref_logp, "k3+")
    assert torch.equal(plus.detach(), probes.kl_estimate(logp, ref_logp, "k3").detach())


def test_kl_estimate_k1_and_k3_are_unbiased_k2_biased() -> None:
    theta, ref_logp = _policy_and_reference(2)
    logp = torch.log_softmax(theta.detach(), -1)
    p = logp.exp()
    true_kl = (p * (logp - ref_logp)).sum()
    means = {k: (p * probes.kl_estimate(logp, ref_logp, k)).sum() for k in ("k1", "k2", "k3")}
    assert means["k1"].item() == pytest.approx(true_kl.item(), rel=1e-12)
    assert means["k3"].item() == pytest.approx(true_kl.item(), rel=1e-12)
    assert abs(means["k2"].item() - true_kl.item()) > 0.05 * true_kl.item()


def test_kl_estimate_low_var_kl_clamps_at_ten() -> None:
    logp = torch.tensor([-0.1, -30.0, -1.0])
    ref_logp = torch.tensor([-0.2, -0.1, -1.0])
    low_var = probes.kl_estimate(logp, ref_logp, "low_var_kl")
    k3 = probes.kl_estimate(logp, ref_logp, "k3")
    assert low_var[0].item() == pytest.approx(k3[0].item())
    assert low_var[1].item() == 10.0 and k3[1].item() > 1e10
    assert low_var[2].item() == 0.0


def test_kl_estimate_unknown_kind_raises_with_choices() -> None:
    with pytest.raises(ValueError, match="k3"):
        probes.kl_estimate(torch.zeros(2), torch.zeros(2), "k4")


LOGITS = [3.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -2.0]  # token 0 likely, token 7 rare


@pytest.mark.parametrize(
    ("token", "advantage", "sign"),
    [(0, 1.0, -1), (0, -1.0, 1), (7, 1.0, 1), (7, -1.0, -1)],
    ids=["likely-positive", "likely-negative", "rare-positive", "rare-negative"],
)
def test_entropy_change_first_order_prediction_within_one_percent(
    token: int, advantage: float, sign: int
) -> None:
    z = torch.tensor(LOGITS, dtype=torch.float64)
    p, logp = torch.softmax(z, -1), torch.log_softmax(z, -1)
    entropy = probes.entropy_from_logits(z).double()
    dz = 0.05 * advantage * (torch.eye(len(LOGITS), dtype=torch.float64)[token] - p)
    predicted = -(p * (logp + entropy) * dz).sum()  # -Cov_{j~π}(log π_j, Δz_j)
    actual = probes.entropy_from_logits(z + dz).double() - entropy
    assert torch.sign(actual).item() == sign
    assert abs(predicted.item() - actual.item()) < 0.01 * abs(actual.item())


def _bandit_objective(
    logp: torch.Tensor, reward: torch.Tensor, ref_logp: torch.Tensor, beta: float
):
    p = logp.exp()
    return (p * reward).sum() - beta * (p * (logp - ref_logp)).sum()


def test_kl_regularised_bandit_optimum_is_reference_tilted_by_exp_reward() -> None:
    reward = torch.tensor([1.0, 0.6, 0.0, 0.0, 1.2], dtype=torch.float64)
    ref_logp = torch.tensor([0.05, 0.45, 0.30, 0.19, 0.01], dtype=torch.float64).log()
    beta = 0.3
    tilted = torch.log_softmax(ref_logp + reward / beta, -1)  # π* ∝ π_ref · exp(r/β)
    log_z = torch.logsumexp(ref_logp + reward / beta, -1)
    best = _bandit_objective(tilted, reward, ref_logp, beta)
    assert best.item() == pytest.approx(beta * log_z.item(), rel=1e-12)
    # ascend the objective from the reference: it converges to the tilted reference
    theta = ref_logp.clone().requires_grad_(True)
    optimizer = torch.optim.Adam([theta], lr=0.05)
    for _ in range(2000):
        optimizer.zero_grad()
        (-_bandit_objective(torch.log_softmax(theta, -1), reward, ref_logp, beta)).backward()
        optimizer.step()
    assert torch.allclose(torch.softmax(theta, -1), tilted.exp(), atol=1e-6)


def test_entropy_from_logits_matches_definition_and_chunking() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = 3.0 * torch.randn(2, 5, 50, generator=gen)
    p = torch.softmax(logits, -1)
    direct = -(p * torch.log_softmax(logits, -1)).sum(-1)
    assert torch.allclose(probes.entropy_from_logits(logits), direct, atol=1e-5)
    assert torch.allclose(probes.entropy_from_logits(logits, chunk_tokens=3), direct, atol=1e-5)


def test_entropy_from_logits_stable_for_large_vocab_and_logits() -> None:
    vocab = 150_000
    logits = torch.zeros(3, vocab)
    logits[0, 0] = 1e4  # one dominant token: entropy 0, no overflow
    logits[2] = torch.linspace(-50.0, 50.0, vocab, dtype=torch.float32).to(torch.bfloat16).float()
    entropy = probes.entropy_from_logits(logits.to(torch.bfloat16), chunk_tokens=1)
    assert entropy.dtype == torch.float32 and torch.isfinite(entropy).all()
    assert entropy[0].item() == pytest.approx(0.0, abs=1e-6)
    assert entropy[1].item() == pytest.approx(
        torch.log(torch.tensor(float(vocab))).item(), rel=1e-4
    )

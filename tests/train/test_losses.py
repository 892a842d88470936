"""train/losses.py against hand computations on tiny tensors (expected numbers written out by
hand or with plain `math`, never with the code under test)."""

from __future__ import annotations

import math

import pytest
import torch

from train.losses import (SFT_LOSSES, clipped_surrogate, group_advantages, hop_grouped_advantages, masked_mean,
                          reverse_kl, sft_loss_fn, weighted_advantages)

R2 = math.sqrt(2) / 2  # 0.7071...


def close(t: torch.Tensor, expected, tol=1e-4):
    assert t.detach().flatten().tolist() == pytest.approx(list(expected) if isinstance(expected, (list, tuple))
                                                          else [expected], abs=tol)


def test_group_advantages_one_group_population_std():
    # [1, 2, 3]: mean 2, population var 2/3, so A = ±1/sqrt(2/3) = ±sqrt(1.5)
    close(group_advantages(torch.tensor([1.0, 2.0, 3.0])), [-math.sqrt(1.5), 0.0, math.sqrt(1.5)])
    # ints are accepted; [1,0,0,1]: mean .5, std .5
    close(group_advantages(torch.tensor([1, 0, 0, 1])), [1, -1, -1, 1])


def test_group_advantages_batched_and_flat_group_is_exactly_zero():
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.1, 0.1, 0.1, 0.1], [0.0, 0.0, 0.0, 0.0]]))
    close(adv[0], [1, -1, -1, 1])
    assert adv[1].tolist() == [0.0] * 4 and adv[2].tolist() == [0.0] * 4
    assert torch.isfinite(adv).all()


def test_hop_grouped_advantages_normalize_within_equal_hop_counts():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.3])
    hops = torch.tensor([2, 2, 2, 3, 3, 3, 4])
    # hop 2: [1,0,1], mean 2/3, std sqrt(2)/3 -> [1/sqrt2, -sqrt2, 1/sqrt2]
    # hop 3: [0,0,1] -> [-1/sqrt2, -1/sqrt2, sqrt2]; hop 4: a single member -> 0
    close(hop_grouped_advantages(rewards, hops), [R2, -2 * R2, R2, -R2, -R2, 2 * R2, 0.0])
    # interleaved order gives the same per-item values
    perm = torch.tensor([6, 0, 3, 1, 4, 2, 5])
    close(hop_grouped_advantages(rewards[perm], hops[perm]), [0.0, R2, -R2, -2 * R2, -R2, R2, 2 * R2])
    with pytest.raises(ValueError):
        hop_grouped_advantages(rewards, hops[:3])


def _lp(*ratios):
    return torch.tensor([[math.log(r) for r in ratios]])


def test_clipped_surrogate_clips_on_both_sides():
    logp, old, mask = _lp(1.5, 0.5, 1.1), torch.zeros(1, 3), torch.ones(1, 3)
    # A=+1: -min(r, clip(r, .8, 1.2)) = -[1.2, 0.5, 1.1]
    loss, stats = clipped_surrogate(logp, old, torch.tensor([1.0]), mask)
    close(loss, -(1.2 + 0.5 + 1.1) / 3)
    assert stats["clip_frac"] == pytest.approx(1 / 3)
    # A=-1: -min(-r, -clip(r)) = [1.5, 0.8, 1.1]
    loss, stats = clipped_surrogate(logp, old, torch.tensor([-1.0]), mask)
    close(loss, (1.5 + 0.8 + 1.1) / 3)
    assert stats["clip_frac"] == pytest.approx(1 / 3)
    # asymmetric upper bound 1.3
    loss, _ = clipped_surrogate(logp, old, torch.tensor([1.0]), mask, clip_eps_high=0.3)
    close(loss, -(1.3 + 0.5 + 1.1) / 3)


def test_clipped_surrogate_respects_mask_and_aggregates():
    logp, old = _lp(1.5, 0.5, 1.1), torch.zeros(1, 3)
    loss, _ = clipped_surrogate(logp, old, torch.tensor([1.0]), torch.tensor([[1, 1, 0]]))
    close(loss, -(1.2 + 0.5) / 2)  # the masked token (ratio 1.1) does not count
    # ratio 1 everywhere, A = [1, -2], per-token loss = -A; seq 1 has 3 tokens, seq 2 has 1
    z, adv, mask = torch.zeros(2, 3), torch.tensor([1.0, -2.0]), torch.tensor([[1, 1, 1], [1, 0, 0]])
    close(clipped_surrogate(z, z, adv, mask)[0], (-3 + 2) / 4)
    close(clipped_surrogate(z, z, adv, mask, aggregate="seq-mean-token-mean")[0], (-1 + 2) / 2)
    close(clipped_surrogate(z, z, adv, mask, aggregate="seq-mean-token-sum")[0], (-3 + 2) / 2)
    with pytest.raises(ValueError):
        clipped_surrogate(z, z, adv, mask, aggregate="nope")


def test_clipped_surrogate_k3_kl_term():
    logp, old, ref, mask = _lp(1.5, 0.5, 1.1), torch.zeros(1, 3), torch.zeros(1, 3), torch.ones(1, 3)
    # k3 with ref - logp = -ln r: 1/r + ln r - 1
    k3 = [1 / r + math.log(r) - 1 for r in (1.5, 0.5, 1.1)]
    loss, stats = clipped_surrogate(logp, old, torch.tensor([1.0]), mask, ref_logprobs=ref, kl_coef=0.1)
    close(loss, -(1.2 + 0.5 + 1.1) / 3 + 0.1 * sum(k3) / 3)
    assert stats["kl"] == pytest.approx(sum(k3) / 3, abs=1e-5)
    assert stats["pg_loss"] == pytest.approx(-(1.2 + 0.5 + 1.1) / 3, abs=1e-5)
    # kl_coef 0 leaves the loss alone but still reports the KL
    loss0, stats0 = clipped_surrogate(logp, old, torch.tensor([1.0]), mask, ref_logprobs=ref)
    close(loss0, -(1.2 + 0.5 + 1.1) / 3)
    assert stats0["kl"] > 0


def test_clipped_surrogate_gradients():
    # token 1 clipped (ratio 1.5 > 1.2 with A>0): zero gradient; token 2 (ratio 1): d/dlogp = -A * r / N
    logp = _lp(1.5, 1.0).requires_grad_(True)
    loss, _ = clipped_surrogate(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2))
    loss.backward()
    close(logp.grad, [0.0, -0.5])
    # with the KL term: d k3/d logp = 1 - exp(ref - logp) = 1 - 1/r
    logp = _lp(1.5, 1.0).requires_grad_(True)
    loss, _ = clipped_surrogate(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2),
                                ref_logprobs=torch.zeros(1, 2), kl_coef=0.5)
    loss.backward()
    close(logp.grad, [0.5 * (1 - 1 / 1.5) / 2, -0.5])
    logp = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    old = logp.detach() + 0.05 * torch.randn(2, 4, dtype=torch.float64)
    ref = torch.randn(2, 4, dtype=torch.float64)
    fn = lambda x: clipped_surrogate(x, old, torch.tensor([0.7, -1.3], dtype=torch.float64),  # noqa: E731
                                     torch.ones(2, 4), ref_logprobs=ref, kl_coef=0.2)[0]
    assert torch.autograd.gradcheck(fn, (logp,))


def test_reverse_kl_full_vocabulary_by_hand():
    s = torch.tensor([[[0.0, 0.0], [1.0, 2.0]]])            # p_s = [.5, .5] at t=0
    t = torch.tensor([[[0.0, math.log(3.0)], [1.0, 2.0]]])  # p_t = [.25, .75] at t=0; t=1 equal
    kl = reverse_kl(s, t)
    # KL(s||t) = .5 ln(.5/.25) + .5 ln(.5/.75) = .5 ln(4/3); KL(t||s) would be 0.1308
    close(kl, [0.5 * math.log(4 / 3), 0.0])
    close(reverse_kl(s, t, torch.tensor([[0, 1]])), [0.0, 0.0])
    # shifting logits by a constant changes nothing (full softmax)
    close(reverse_kl(s + 5.0, t - 2.0), [0.5 * math.log(4 / 3), 0.0])
    with pytest.raises(ValueError):
        reverse_kl(s, t[..., :1])


def test_reverse_kl_gradients_reach_student_only():
    s = torch.randn(2, 3, 5, requires_grad=True)
    t = torch.randn(2, 3, 5, requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    masked_mean(reverse_kl(s, t, mask), mask).backward()
    assert s.grad.abs().sum() > 0 and t.grad is None
    assert s.grad[0, 2].abs().sum() == 0 and s.grad[1, 1:].abs().sum() == 0  # masked tokens give no gradient


def test_masked_mean_and_weighted_advantages():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    m = torch.tensor([[1, 0, 1], [0, 0, 0]])
    close(masked_mean(x, m), 2.0)
    close(masked_mean(x, m, dim=-1), [2.0, 0.0])  # an empty row gives 0, not nan
    close(masked_mean(x), 3.5)
    close(weighted_advantages(torch.tensor([[1.0, -1.0], [2.0, 0.0]]), torch.tensor([0.5, 0.0])),
          [0.5, -0.5, 0.0, 0.0])
    close(weighted_advantages(torch.tensor([1.0, -2.0]), torch.tensor([2.0, 0.25])), [2.0, -0.5])
    with pytest.raises(ValueError):
        weighted_advantages(torch.ones(2, 2), torch.tensor([1.0, -0.1]))
    with pytest.raises(ValueError):
        weighted_advantages(torch.ones(2, 2), torch.ones(3))


def test_sft_losses_nll_and_dft_by_hand():
    """DFT scales each token's cross entropy by its probability, held constant: its value is
    -p log p and its gradient p times cross entropy's; an unknown name is refused."""
    logp = torch.log(torch.tensor([0.9, 0.5, 0.01])).requires_grad_(True)
    p = logp.detach().exp()
    assert torch.allclose(sft_loss_fn("nll")(logp), -logp.detach())
    dft_loss = sft_loss_fn("dft")(logp)
    assert torch.allclose(dft_loss, -p * logp.detach())
    dft_loss.sum().backward()
    assert torch.allclose(logp.grad, -p)  # cross entropy's gradient is -1 per token
    assert set(SFT_LOSSES) == {"nll", "dft"}
    with pytest.raises(ValueError, match="--loss-type must be one of nll, dft, not 'focal'"):
        sft_loss_fn("focal")

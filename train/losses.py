"""Training losses as pure torch functions (no model, no state): GRPO group advantages, HRPO
hop-grouped advantages, the token-level clipped surrogate with a k3 KL-to-reference term,
per-token reverse KL(student || teacher) over the full vocabulary, CARE per-prompt
advantage weights, SFT's per-token losses (`SFT_LOSSES`: cross entropy, DFT), and token
log-probabilities from hidden states in chunks (the logits of a long sequence never exist at
once). train/objective.py composes them into the policy-gradient objective of
train/grpo.py (and of the stages that add terms to it).

Shapes: B prompts, G samples per prompt (a group), T tokens, V vocabulary. Masks are 1 for
tokens that count (completion tokens the policy wrote) and 0 for padding / tool output.

    from train.losses import group_advantages, clipped_surrogate
    adv = group_advantages(rewards.view(B, G)).view(-1)          # one advantage per sequence
    loss, stats = clipped_surrogate(logp, old_logp, adv, mask, ref_logprobs=ref, kl_coef=0.04)

Tests: tests/train/test_losses.py (each function against a hand computation).
"""

from __future__ import annotations

import torch

AGGREGATES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


def nll(logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token cross entropy of the labelled tokens from their log-probabilities: -log p."""
    return -logprobs


def dft(logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token Dynamic Fine-Tuning loss (Wu et al., 2025; TRL's SFT `loss_type="dft"`): the cross
    entropy scaled by the token's probability, held constant, -sg(p) * log p. Its gradient is p times
    cross entropy's, so tokens the model already finds likely weigh more than those it does not."""
    return -logprobs * logprobs.detach().exp()


SFT_LOSSES = {"nll": nll, "dft": dft}  # SFT's `--loss-type`: per-token loss from the labelled tokens' log p


def sft_loss_fn(name: str):
    """The per-token SFT loss named `name` (`SFT_LOSSES`), or ValueError naming the choices."""
    if name not in SFT_LOSSES:
        raise ValueError(f"--loss-type must be one of {', '.join(SFT_LOSSES)}, not {name!r}")
    return SFT_LOSSES[name]


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None = None, dim: int | None = None) -> torch.Tensor:
    """sum(x * mask) / sum(mask) over `dim` (all elements when None); 0 where the mask is empty."""
    if mask is None:
        return x.mean() if dim is None else x.mean(dim)
    mask = mask.to(x.dtype)
    num = (x * mask).sum() if dim is None else (x * mask).sum(dim)
    den = mask.sum() if dim is None else mask.sum(dim)
    return num / den.clamp_min(1.0)


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantages: A_i = (r_i - mean(r)) / (std(r) + eps) within each group.

    `rewards` is [G] (one group) or [B, G] (B groups of G along the last axis). std is the
    population std (divide by G, not G-1). A flat group (all rewards equal) gives exactly 0.
    """
    r = rewards.to(torch.float32) if not rewards.is_floating_point() else rewards
    mean = r.mean(dim=-1, keepdim=True)
    centered = r - mean
    std = centered.pow(2).mean(dim=-1, keepdim=True).sqrt()
    adv = centered / (std + eps)
    flat = r.amax(dim=-1, keepdim=True) == r.amin(dim=-1, keepdim=True)
    return torch.where(flat, torch.zeros_like(adv), adv)


def hop_grouped_advantages(rewards: torch.Tensor, hop_counts: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """HRPO advantages: normalize each reward within the group of rewards of equal hop count.

    A_i = (r_i - mean{r_j : h_j = h_i}) / (std{r_j : h_j = h_i} + eps), population std, and 0
    for a flat or single-member hop group. `rewards` and `hop_counts` are both [N].
    """
    r = rewards.to(torch.float32) if not rewards.is_floating_point() else rewards
    if r.shape != hop_counts.shape or r.dim() != 1:
        raise ValueError(f"rewards {tuple(r.shape)} and hop_counts {tuple(hop_counts.shape)} must both be [N]")
    adv = torch.zeros_like(r)
    for h in torch.unique(hop_counts):
        idx = (hop_counts == h).nonzero(as_tuple=True)[0]
        adv = adv.index_copy(0, idx, group_advantages(r[idx], eps))
    return adv


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || ref): exp(ref - logp) - (ref - logp) - 1 (>= 0)."""
    d = ref_logprobs - logprobs
    return torch.exp(d) - d - 1.0


def aggregate_tokens(per_token: torch.Tensor, mask: torch.Tensor, how: str = "token-mean") -> torch.Tensor:
    """A per-token loss [B, T] as one number over the masked tokens, by `how` (AGGREGATES;
    see `clipped_surrogate`)."""
    if how == "token-mean":
        return masked_mean(per_token, mask)
    m = mask.to(per_token.dtype)
    if how == "seq-mean-token-mean":
        return masked_mean(per_token, m, dim=-1).mean()
    if how == "seq-mean-token-sum":
        return (per_token * m).sum(-1).mean()
    raise ValueError(f"aggregate must be one of {AGGREGATES}, not {how!r}")


def clipped_pg(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
               clip_eps: float = 0.2, clip_eps_high: float | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token clipped policy-gradient loss pg_t (see `clipped_surrogate`), the ratio and
    where the clip was active; [B, T] each, not yet masked."""
    high = clip_eps if clip_eps_high is None else clip_eps_high
    adv = advantages.unsqueeze(-1) if advantages.dim() == logprobs.dim() - 1 else advantages
    adv = adv.to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high) * adv
    return -torch.minimum(unclipped, clipped), ratio, clipped < unclipped


def clipped_surrogate(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                      mask: torch.Tensor, clip_eps: float = 0.2, clip_eps_high: float | None = None,
                      ref_logprobs: torch.Tensor | None = None, kl_coef: float = 0.0,
                      aggregate: str = "token-mean") -> tuple[torch.Tensor, dict[str, float]]:
    """Token-level PPO/GRPO loss (to minimize).

    ratio_t = exp(logp_t - old_logp_t); with A the sequence advantage broadcast over tokens,
        pg_t = -min(ratio_t * A, clip(ratio_t, 1 - clip_eps, 1 + clip_eps_high) * A)
    and with a reference, loss_t = pg_t + kl_coef * k3_t, k3_t = exp(ref_t - logp_t) -
    (ref_t - logp_t) - 1. The per-token loss is aggregated over masked tokens by `aggregate`:
    "token-mean" (all tokens of the batch weigh equally, DAPO), "seq-mean-token-mean" (GRPO
    paper) or "seq-mean-token-sum" (Dr. GRPO style, no length normalization).

    Shapes: logprobs/old_logprobs/ref_logprobs/mask [B, T]; advantages [B] or [B, T].
    Returns (loss, stats) with stats: pg_loss, kl, clip_frac, ratio_mean (python floats).
    """
    pg, ratio, was_clipped = clipped_pg(logprobs, old_logprobs, advantages, clip_eps, clip_eps_high)
    per_token = pg
    kl = None
    if ref_logprobs is not None:
        kl = k3_kl(logprobs, ref_logprobs)
        if kl_coef:
            per_token = pg + kl_coef * kl
    loss = aggregate_tokens(per_token, mask, aggregate)
    stats = pg_stats(pg, ratio, was_clipped, mask, aggregate)
    with torch.no_grad():
        stats["kl"] = float(masked_mean(kl, mask.to(kl.dtype))) if kl is not None else 0.0
    return loss, stats


@torch.no_grad()
def pg_stats(pg: torch.Tensor, ratio: torch.Tensor, was_clipped: torch.Tensor, mask: torch.Tensor,
             aggregate: str = "token-mean") -> dict[str, float]:
    """pg_loss (aggregated), clip_frac and ratio_mean (over masked tokens) of `clipped_pg`'s output."""
    m = mask.to(ratio.dtype)
    return {"pg_loss": float(aggregate_tokens(pg, mask, aggregate)),
            "clip_frac": float(masked_mean(was_clipped.to(m.dtype), m)),
            "ratio_mean": float(masked_mean(ratio, m))}


def reverse_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
               mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token KL(student || teacher) over the full vocabulary:

        KL_t = sum_v p_s(v) * (log p_s(v) - log p_t(v)),  p = softmax(logits)

    Logits are [B, T, V] (or [T, V]); returns [B, T] (or [T]) with masked-out tokens set to 0.
    Gradients flow to the student; the teacher is detached. Average with `masked_mean`.
    """
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"student {tuple(student_logits.shape)} and teacher {tuple(teacher_logits.shape)} differ")
    logp_s = torch.log_softmax(student_logits.float(), dim=-1)
    logp_t = torch.log_softmax(teacher_logits.detach().float(), dim=-1)
    kl = (logp_s.exp() * (logp_s - logp_t)).sum(-1)
    if mask is not None:
        kl = kl * mask.to(kl.dtype)
    return kl


def chunked_token_logprobs(hidden: torch.Tensor, head, targets: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """log softmax(head(hidden))[target] for M positions ([M, H] hidden states, [M] targets),
    `chunk` positions at a time: each chunk's [chunk, V] logits are recomputed in the backward
    pass (activation checkpointing) instead of kept, so memory does not grow with M. Same values
    and gradients as projecting all M positions at once."""
    from torch.utils.checkpoint import checkpoint

    def one(h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        logits = head(h).float()
        return logits.gather(-1, t[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)

    parts = [checkpoint(one, hidden[a:a + chunk], targets[a:a + chunk], use_reentrant=False)
             if torch.is_grad_enabled() else one(hidden[a:a + chunk], targets[a:a + chunk])
             for a in range(0, hidden.shape[0], chunk)]
    return torch.cat(parts) if parts else hidden.new_zeros(0, dtype=torch.float32)


def weighted_advantages(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """CARE per-prompt weighting: A'_{b,g} = w_b * A_{b,g}.

    `advantages` is [B, G] (or [B] / [B, T]) and `weights` [B], one weight per prompt (e.g.
    the probability that the prompt's pseudo-label is right); weights must be >= 0.
    """
    if weights.dim() != 1 or weights.shape[0] != advantages.shape[0]:
        raise ValueError(f"weights {tuple(weights.shape)} must be [B] with B = {advantages.shape[0]}")
    if bool((weights < 0).any()):
        raise ValueError("weights must be non-negative")
    w = weights.to(advantages.dtype).reshape(-1, *([1] * (advantages.dim() - 1)))
    return advantages * w

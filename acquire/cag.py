"""Correction advantage gap (CAG): how much a prompt's GRPO advantages change when its
pseudo-label is replaced by the true label. With A(r) = (r - mean r) / std r over the n
responses (population std; 0 for a flat group, train.losses.group_advantages):

    CAG = || A(r_pseudo) - A(r_true) ||_2

From counts alone: x responses in the vote (the pseudo-label's cluster), y correct responses
outside it (when the vote is wrong), n responses:

    vote correct                  -> 0
    vote wrong, y = 0             -> sqrt(n)    (the pseudo advantages against all zeros)
                                     0 when x = n too (both groups flat)
    vote wrong, 0 < x < n, y > 0  -> sqrt(2n (1 + sqrt(xy / ((n - x)(n - y)))))

The direct computation and the closed form agree (tests/acquire/test_cag.py checks every
feasible x, y for n <= 16); CARE scores a prompt by E[CAG] under its predicted y.
"""

from __future__ import annotations

import math


def cag(pseudo_rewards, true_rewards) -> float:
    """|| A(pseudo) - A(true) ||_2 for one prompt's responses."""
    import torch  # here, not at the top: the command line imports the strategies

    from train.losses import group_advantages

    p = torch.as_tensor(pseudo_rewards, dtype=torch.float64)
    t = torch.as_tensor(true_rewards, dtype=torch.float64)
    if p.shape != t.shape or p.dim() != 1:
        raise ValueError(f"pseudo {tuple(p.shape)} and true {tuple(t.shape)} rewards must both be [n]")
    return float(torch.linalg.vector_norm(group_advantages(p, eps=0.0) - group_advantages(t, eps=0.0)))


def cag_from_counts(n: int, x: int, y: int, vote_correct: bool = False) -> float:
    """CAG from the vote size x and the correct responses outside the vote y (module docstring)."""
    if not (0 <= x <= n and 0 <= y <= n - x):
        raise ValueError(f"need 0 <= x <= n and 0 <= y <= n - x, got n={n}, x={x}, y={y}")
    if vote_correct or x == 0:
        return 0.0 if vote_correct else (math.sqrt(n) if 0 < y < n else 0.0)
    if y == 0:
        return 0.0 if x == n else math.sqrt(n)
    return math.sqrt(2 * n * (1 + math.sqrt(x * y / ((n - x) * (n - y)))))

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

The closed form holds for 0/1 rewards, label-aware GRPO's default (`--label-reward binary`).
With partial credit (`--label-reward partial`: 0.5 F1 for a near miss, plus the format bonus)
the gap training sees is not a function of x and y alone, so `group_cag` and `group_costs`
compute it from the rewards the step uses (`step_rewards`): the gap the strategies rank by is
always the advantage gap of the rewards GRPO trains on.

    group_cag(group, true_label)    # the true CAG of one group (oracle_cag)
    group_costs(group)              # [n + 1]: the CAG if y responses outside the vote were right
"""

from __future__ import annotations

import math

from acquire.group import Group
from generators.vote import rewards


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


def step_rewards(group: Group, label: str | None, aliases=()) -> list[float]:
    """The rewards label-aware GRPO gives `group`'s responses against `label` (None: a label
    none of them matches): 0/1 exact match with `group.reward == "binary"`; with "partial",
    train.reward's score (1, else 0.5 F1) plus `group.format_weight` per well-formed rollout."""
    if group.reward == "binary":
        return rewards(group.vote, label, aliases)
    from train.reward import NO_ANSWER, score_parsed

    formats = group.formats or [0.0] * group.n
    out = []
    for answer, fmt in zip(group.vote.answers, formats):
        parts = score_parsed(answer, label, list(aliases)) if label and answer is not None else NO_ANSWER
        out.append(parts["score"] + (group.format_weight if fmt == 1.0 else 0.0))
    return out


def group_cag(group: Group, label: str | None, aliases=()) -> float:
    """CAG of replacing `group`'s vote by `label`, on the rewards the step uses."""
    return cag(step_rewards(group, group.vote.label), step_rewards(group, label, aliases))


def group_costs(group: Group) -> list[float]:
    """[n + 1]: per y, the CAG if the right answer is a cluster of y responses outside the
    vote (y = 0: an answer nobody gave); with partial rewards the mean over the clusters of
    that size. 0 where y is not feasible (acquire.probes.feasible)."""
    n, x = group.n, (group.vote.sizes[0] if group.vote.members else 0)
    if group.reward == "binary":
        return [cag_from_counts(n, x, y) if y == 0 or y in group.vote.sizes[1:] else 0.0 for y in range(n + 1)]
    pseudo = step_rewards(group, group.vote.label)
    sums, counts = [0.0] * (n + 1), [0] * (n + 1)
    sums[0], counts[0] = cag(pseudo, step_rewards(group, None)), 1
    for members in group.vote.members[1:]:
        label = group.vote.answers[members[0]]
        sums[len(members)] += cag(pseudo, step_rewards(group, label))
        counts[len(members)] += 1
    return [s / c if c else 0.0 for s, c in zip(sums, counts)]

"""Acquisition strategies: which prompts of a step's batch get a bought label. Each strategy
scores the groups (higher = buy first); `choose` buys the top fraction `p` of the batch by
score, never more than the budget left. One shape, one registry entry each:

    random          a uniform draw (the baseline)
    vote_entropy    entropy of the answer clusters (no answer counts as one more cluster)
    token_prob      1 - the responses' mean token probability (least confident first)
    self_certainty  minus the responses' mean self-certainty (acquire/group.py)
    oracle_cag      the true CAG, from the held-back label (simulation only: an upper bound)
    care            the stage-2 expectation of CAG under CARE's probes (acquire/probes.py);
                    from step `warmup` on, the fraction `p2` (rounded up) of prompts the
                    probes think most likely voted right is gated out; before it, the
                    probes rank without gating (as CARE's code)

Both CAG strategies measure the gap on the rewards the step uses (acquire.cag.step_rewards:
binary by default, partial credit with the format bonus when the groups say so).

    scores = STRATEGIES["vote_entropy"].score(groups, Context(step=3))
    chosen = choose(groups, scores, p=0.2, left=12)
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable

from acquire.cag import group_cag
from acquire.group import Group


@dataclass
class Context:
    """What a strategy may read besides the groups."""

    step: int = 0  # training step (CARE's warm-up)
    seed: int = 0
    probes: object = None  # acquire.probes.Probes for care
    warmup: int = 20  # CARE: steps before stage 1 gates (the probes rank from the start)
    gate: float = 0.1  # CARE: p2, the fraction most likely voted right left out


@dataclass(frozen=True)
class Strategy:
    name: str
    score: Callable[[list[Group], Context], list[float]]
    needs: str = ""  # what the groups must carry: "", "logprobs", "states" or "true_label"
    help: str = ""


def _random(groups, ctx):
    rng = random.Random(f"{ctx.seed}|{ctx.step}")
    return [rng.random() for _ in groups]


def _entropy(groups, ctx):
    out = []
    for g in groups:
        parts = list(g.vote.sizes) + ([g.n - sum(g.vote.sizes)] if sum(g.vote.sizes) < g.n else [])
        out.append(-sum(s / g.n * math.log(s / g.n) for s in parts if s))
    return out


def _token_prob(groups, ctx):
    def mean_prob(g):
        probs = [math.exp(v) for lps in g.token_logprobs for v in lps]
        return sum(probs) / len(probs) if probs else 0.0
    return [1.0 - mean_prob(g) for g in groups]


def _self_certainty(groups, ctx):
    return [-(sum(g.self_certainty) / len(g.self_certainty)) if g.self_certainty else 0.0 for g in groups]


def _oracle(groups, ctx):
    out = []
    for g in groups:
        if g.true_label is None:
            raise ValueError(f"oracle_cag needs the true label of {g.prompt_id} (a simulation)")
        out.append(group_cag(g, g.true_label, g.aliases))
    return out


def _care(groups, ctx):
    if ctx.probes is None:
        raise ValueError("care needs its probes (acquire.probes.Probes)")
    p_right, scores = ctx.probes.gaps(groups)
    if ctx.step < ctx.warmup:  # warm-up: the probes rank, stage 1 does not gate yet
        return scores
    k = min(len(groups), math.ceil(round(ctx.gate * len(groups), 9)))
    for i in sorted(range(len(groups)), key=lambda i: -p_right[i])[:k]:
        scores[i] = -math.inf
    return scores


STRATEGIES: dict[str, Strategy] = {}


def register(s: Strategy) -> Strategy:
    STRATEGIES[s.name] = s
    return s


for _s in (Strategy("random", _random, help="a uniform draw"),
           Strategy("vote_entropy", _entropy, help="entropy of the answer clusters"),
           Strategy("token_prob", _token_prob, "logprobs", "1 - mean token probability"),
           Strategy("self_certainty", _self_certainty, "logprobs", "minus the mean self-certainty"),
           Strategy("oracle_cag", _oracle, "true_label", "the true CAG (simulation only)"),
           Strategy("care", _care, "states", "the stage-2 expected CAG under CARE's probes, gated after the warm-up")):
    register(_s)


def get_strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"--strategy must be one of {', '.join(STRATEGIES)}, not {name!r}")
    return STRATEGIES[name]


def choose(groups: list[Group], scores: list[float], p: float, left: float, cost: float = 1.0) -> list[Group]:
    """The top `p` of the batch by score (ties: batch order), at most what `left` buys; a
    gated group (score -inf) is never chosen."""
    if not 0 <= p <= 1:
        raise ValueError(f"the query fraction p must be in [0, 1], got {p}")
    k = max(0, min(math.ceil(p * len(groups)), int(left // cost) if cost else len(groups)))
    order = sorted(range(len(groups)), key=lambda i: -scores[i])
    return [groups[i] for i in order[:k] if scores[i] != -math.inf]

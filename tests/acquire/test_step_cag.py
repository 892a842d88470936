"""The CAG every strategy ranks by is the advantage gap of the rewards label-aware GRPO's step
uses (property test on random groups): with binary rewards, oracle_cag and the cost CARE's
stage 2 weighs for the realised y both equal || A(true) - A(pseudo) ||_2 computed from the
rewards the Labeller hands GRPO; with partial credit, oracle_cag follows those rewards
instead of the 0/1 closed form."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from acquire.cag import cag_from_counts, group_cag, group_costs, step_rewards
from acquire.group import Group
from acquire.probes import Example
from acquire.strategies import STRATEGIES, Context
from generators.vote import vote
from train.losses import group_advantages
from train.reward import F1_WEIGHT

WORDS = ["Oslo", "Bern", "Rome", "Lima", "Kiev oblast", "Kiev"]
answers = st.lists(st.one_of(st.none(), st.sampled_from(WORDS)), min_size=2, max_size=12)


def step_gap(pseudo: list[float], true: list[float]) -> float:
    """The gap as GRPO computes advantages (train.losses.group_advantages, its default eps)."""
    a = group_advantages(torch.tensor(pseudo, dtype=torch.float64))
    b = group_advantages(torch.tensor(true, dtype=torch.float64))
    return float(torch.linalg.vector_norm(b - a))


@settings(max_examples=200, deadline=None)
@given(answers, st.sampled_from(WORDS + ["Paris"]))
def test_binary_cag_equals_the_step_advantage_gap(ans, true):
    g = Group("p", vote(ans), true_label=true)
    pseudo = [float(a is not None and g.vote.label is not None and a.lower() == g.vote.label.lower()) for a in ans]
    truth = [float(a is not None and a.lower() == true.lower()) for a in ans]
    assert step_rewards(g, g.vote.label) == pseudo and step_rewards(g, true) == truth  # 0/1, no format bonus
    gap = step_gap(pseudo, truth)
    assert math.isclose(STRATEGIES["oracle_cag"].score([g], Context())[0], gap, rel_tol=1e-4, abs_tol=1e-4)
    if g.vote.members:  # CARE's stage 2 weighs cost(y) for the y a wrong vote's label reveals: the same gap
        e = Example.of(Group("p", g.vote, prompt_state=torch.zeros(2), response_states=torch.zeros(len(ans), 2)), true)
        if e.vote_correct:  # as CARE's code: a right vote is class y = 0, priced as CAG(n, x, 0); its true gap is 0
            assert e.y == 0 and gap == 0.0 and math.isclose(float(e.costs[0]), cag_from_counts(len(ans), g.vote.sizes[0], 0), rel_tol=1e-6)
        else:
            assert math.isclose(float(e.costs[e.y]), gap, rel_tol=1e-4, abs_tol=1e-4), (ans, true, e.y)


@settings(max_examples=100, deadline=None)
@given(answers, st.sampled_from(WORDS), st.lists(st.sampled_from([0.0, 1.0]), min_size=12, max_size=12))
def test_partial_cag_follows_the_partial_rewards(ans, true, formats):

    g = Group("p", vote(ans), true_label=true, reward="partial", formats=formats[:len(ans)], format_weight=0.1)
    r = step_rewards(g, true)
    assert all(x in (0.0, 0.1, 1.0, 1.1) or 0 < x - (0.1 if f else 0) <= F1_WEIGHT for x, f in zip(r, formats))
    gap = step_gap(step_rewards(g, g.vote.label), r)
    assert math.isclose(STRATEGIES["oracle_cag"].score([g], Context())[0], gap, rel_tol=1e-4, abs_tol=1e-4)
    costs = group_costs(g)
    assert len(costs) == len(ans) + 1 and costs[0] >= 0.0


def test_partial_credit_changes_the_gap_the_closed_form_gives():
    ans = ["Kiev"] * 3 + ["Kiev oblast"] * 2 + ["Oslo"] * 3  # vote Kiev (3, first), truth "Kiev oblast"
    binary, partial = Group("p", vote(ans)), Group("p", vote(ans), reward="partial", formats=[1.0] * 8, format_weight=0.1)
    assert math.isclose(group_cag(binary, "Kiev oblast"), cag_from_counts(8, 3, 2), rel_tol=1e-9)
    assert not math.isclose(group_cag(partial, "Kiev oblast"), cag_from_counts(8, 3, 2), rel_tol=1e-3)

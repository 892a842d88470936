"""Acquisition strategies rank hand-made groups as their definitions say, and `choose` buys
the top fraction within the budget, never a gated prompt."""

import math

import pytest
import torch

from acquire.group import Group
from acquire.probes import Probes
from acquire.strategies import STRATEGIES, Context, choose, get_strategy
from generators.vote import vote


def group(pid: str, answers, logprob: float = -1.0, certainty: float = 1.0, true: str | None = None) -> Group:
    n = len(answers)
    return Group(pid, vote(answers), token_logprobs=[[logprob] * 3] * n, self_certainty=[certainty] * n,
                 prompt_state=torch.ones(4) * logprob, response_states=torch.ones(n, 4), lengths=[3] * n, true_label=true)


SURE = group("sure", ["Oslo"] * 4, logprob=-0.01, certainty=5.0, true="Oslo")  # unanimous, confident, right
SPLIT = group("split", ["Oslo", "Bern", "Rome", None], logprob=-2.0, certainty=0.5, true="Rome")
WRONG = group("wrong", ["Oslo", "Oslo", "Bern", "Bern"], logprob=-1.0, certainty=2.0, true="Bern")


@pytest.mark.parametrize("name", ["vote_entropy", "token_prob", "self_certainty"])
def test_uncertainty_strategies_rank_the_split_group_first_and_the_sure_one_last(name):
    scores = STRATEGIES[name].score([SURE, SPLIT, WRONG], Context())
    assert scores[1] > scores[2] > scores[0]


def test_oracle_cag_scores_the_wrong_vote_and_needs_the_true_label():
    scores = STRATEGIES["oracle_cag"].score([SURE, SPLIT, WRONG], Context())
    assert scores[0] == 0.0 and scores[2] == pytest.approx(math.sqrt(2 * 4 * (1 + 1)))  # x = y = 2, n = 4
    assert scores[1] == pytest.approx(math.sqrt(2 * 4 * (1 + math.sqrt(1 / 9))))  # x = 1, y = 1
    with pytest.raises(ValueError, match="true label"):
        STRATEGIES["oracle_cag"].score([group("x", ["Oslo"] * 4)], Context())


def test_random_is_seeded_by_step_and_care_gates_after_warm_up():
    r = STRATEGIES["random"].score([SURE, SPLIT, WRONG], Context(step=3))
    assert r == STRATEGIES["random"].score([SURE, SPLIT, WRONG], Context(step=3)) != \
        STRATEGIES["random"].score([SURE, SPLIT, WRONG], Context(step=4))
    probes = Probes(hidden=4, n=4, width=8, resp_width=8)
    warm = STRATEGIES["care"].score([SURE, SPLIT, WRONG], Context(step=0, probes=probes))
    assert warm == probes.expected_cag([SURE, SPLIT, WRONG]) and -math.inf not in warm  # warm-up: probes rank, no gate
    scores = STRATEGIES["care"].score([SURE, SPLIT, WRONG], Context(step=50, probes=probes, gate=0.3))
    p_right = probes.predict([SURE, SPLIT, WRONG])[0].tolist()
    assert scores[max(range(3), key=lambda i: p_right[i])] == -math.inf and sum(s == -math.inf for s in scores) == 1
    assert sum(s == -math.inf for s in STRATEGIES["care"].score([SURE, SPLIT, WRONG],
                                                                 Context(step=50, probes=probes, gate=0.34))) == 2


def test_choose_buys_the_top_fraction_within_the_budget():
    groups = [group(f"g{i}", ["Oslo"] * 4) for i in range(10)]
    scores = [float(i) for i in range(10)]
    assert [g.prompt_id for g in choose(groups, scores, p=0.2, left=5)] == ["g9", "g8"]
    assert [g.prompt_id for g in choose(groups, scores, p=0.5, left=1)] == ["g9"]
    assert choose(groups, [-math.inf] * 10, p=1.0, left=10) == []
    with pytest.raises(ValueError, match="--strategy must be one of"):
        get_strategy("best")

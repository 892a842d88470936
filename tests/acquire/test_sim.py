"""experiments/acquire_sim.py's simulation on hand-made groups (no sampling): every strategy on
every seed, bootstrap intervals that contain their estimate, the oracle correcting at least as
many votes as random, and the picks compared between binary and partial rewards."""

import argparse
import random

import pytest
import torch

from acquire.group import Group
from generators.vote import vote
from experiments.acquire_sim import intervals, picks_changed, report, simulate_seeds

H, N = 8, 8
WORDS = ["Oslo", "Bern", "Rome", "Lima", "Kiev"]


def groups(count: int) -> list[Group]:
    rng = random.Random(0)
    out = []
    for i in range(count):
        answers = [rng.choice(WORDS[:rng.randint(1, 5)]) if rng.random() < 0.85 else None for _ in range(N)]
        g = Group(f"p{i}", vote(answers), prompt_state=torch.randn(H), response_states=torch.randn(N, H),
                  lengths=[rng.randint(5, 50) for _ in range(N)], token_logprobs=[[-rng.random()] * 3] * N,
                  self_certainty=[rng.random() for _ in range(N)], true_label=rng.choice(WORDS),
                  formats=[1.0] * N)
        out.append(g)
    return out


@pytest.mark.slow  # CARE's probes at their real width: about 2 minutes on two busy cores
def test_every_strategy_and_seed_with_intervals_and_picks():
    pool = groups(64)
    a = argparse.Namespace(n=N, batch=16, p=0.25, budget=12, warmup=2, gate=0.1, seeds=[0, 1],
                           strategies=["random", "vote_entropy", "token_prob", "self_certainty", "care", "oracle_cag"])
    results = {"simulation": []}
    simulate_seeds(pool, H, a, results)
    assert len(results["simulation"]) == 12 and all(r["bought"] == 12 for r in results["simulation"])
    iv = intervals(results["simulation"], a.strategies, N, draws=200)
    for name, m in iv.items():
        for k in ("corrected", "wrong_votes_fixed", "noise_after"):
            value, low, high = m[k]
            assert low <= value <= high, (name, k, m[k])
        assert m["noise_after"][0] <= m["noise_before"]
        below, low, high = m["noise_below_random"]
        assert low <= below <= high
        assert below == pytest.approx(iv["random"]["noise_after"][0] - m["noise_after"][0])
    assert iv["random"]["noise_below_random"] == (0.0, 0.0, 0.0)
    assert iv["oracle_cag"]["corrected"][0] >= iv["random"]["corrected"][0]
    assert iv["oracle_cag"]["corrected"][0] == 1.0  # enough wrong votes in every batch: it buys only those
    changed = picks_changed(pool, H, a, a.strategies)
    assert all(changed[s] == 0.0 for s in ("random", "vote_entropy", "token_prob", "self_certainty"))
    results.update(intervals=iv, picks_changed=changed)
    table = report(results, a)
    assert table.count("\n") == 1 + len(a.strategies) and "| care |" in table

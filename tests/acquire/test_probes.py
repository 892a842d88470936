"""CARE's probes learn a planted signal of vote correctness from bought labels, their score is
stage 2's expectation of CAG's closed form (not weighed by stage 1), their losses are
class-balanced as CARE's, and their state (networks, batch-norm statistics, optimizers,
replay buffer) survives a checkpoint."""

import math
import random

import torch

from acquire.cag import cag_from_counts
from acquire.group import Group
from acquire.probes import Example, Probes, class_weights, feasible
from generators.vote import vote

H, N = 16, 8


def planted(rng: random.Random, direction: torch.Tensor) -> tuple[Group, str]:
    """A group whose vote (5 of 8 say "Oslo", 3 say "Bern") is right exactly when its prompt
    state leans along `direction`."""
    right = rng.random() < 0.5
    state = torch.randn(H, generator=torch.Generator().manual_seed(rng.randrange(10**9)))
    g = Group(f"p{rng.random()}", vote(["Oslo"] * 5 + ["Bern"] * 3), lengths=[10] * N,
              prompt_state=state + (1.5 if right else -1.5) * direction, response_states=torch.randn(N, H))
    return g, "Oslo" if right else "Bern"


def auc(scores: list[float], truth: list[bool]) -> float:
    pos = [s for s, t in zip(scores, truth) if t]
    neg = [s for s, t in zip(scores, truth) if not t]
    return sum((p > q) + 0.5 * (p == q) for p in pos for q in neg) / (len(pos) * len(neg))


def test_stage_one_learns_a_planted_signal_and_survives_a_checkpoint(tmp_path):
    rng, direction = random.Random(0), torch.nn.functional.normalize(torch.randn(H), dim=0)
    probes = Probes(H, N, width=64, resp_width=64, seed=0)
    test = [planted(rng, direction) for _ in range(200)]
    before = auc(probes.predict([g for g, _ in test])[0].tolist(), [label == "Oslo" for _, label in test])
    for _ in range(60):  # 60 training steps, 8 bought labels each
        probes.learn([Example.of(*planted(rng, direction)) for _ in range(8)])
    p_right = probes.predict([g for g, _ in test])[0].tolist()
    after = auc(p_right, [label == "Oslo" for _, label in test])
    assert after > 0.85 and after > before + 0.2, (before, after)

    torch.save(probes.state_dict(), tmp_path / "probes.pt")
    again = Probes(H, N, width=64, resp_width=64, seed=1)
    again.load_state_dict(torch.load(tmp_path / "probes.pt", weights_only=False))
    assert torch.equal(again.predict([g for g, _ in test])[0], torch.tensor(p_right))
    assert len(again.buffer) == len(probes.buffer) == 480 and again.updates == 60
    probes.learn([]), again.learn([])  # the same next step: optimizer state and draw order restored
    assert all(torch.equal(a, b) for a, b in zip(probes.parameters(), again.parameters()))


def test_expected_cag_is_stage_two_s_expectation_of_the_closed_form():
    g = Group("p", vote(["Oslo"] * 4 + ["Bern"] * 3 + [None]), prompt_state=torch.randn(H),
              response_states=torch.randn(N, H), lengths=[5] * N)
    assert feasible(g).tolist() == [True, False, False, True] + [False] * 5  # y: 0 or Bern's 3
    probes = Probes(H, N, width=8, resp_width=8)
    p_right, p_y = probes.predict([g])
    want = float(p_y[0, 0]) * cag_from_counts(N, 4, 0) + float(p_y[0, 3]) * cag_from_counts(N, 4, 3)
    assert math.isclose(probes.expected_cag([g])[0], want, rel_tol=1e-5)
    assert Example.inputs(g).outside.tolist() == [False] * 4 + [True] * 3 + [False]  # stage 2 pools Bern's
    mask = feasible(g)
    assert float(p_y[0][~mask].sum()) == 0.0 and math.isclose(float(p_y[0][mask].sum()), 1.0, rel_tol=1e-6)


def test_class_weights_balance_as_care():
    w = class_weights(torch.tensor([1] * 9 + [0]), 2)  # counts 1 and 9: 1 and 1/3, mean-normalised
    assert torch.allclose(w, torch.tensor([1.5, 0.5]))
    w = class_weights(torch.tensor([0, 1, 2, 4] * 1000 + [3]), 6)
    assert w[3] == 4.0 and (w[[0, 1, 2, 4]] == 0.25).all() and w[5] == 0.0  # clipped; an absent class 0


def test_a_rare_class_is_still_learned_with_balancing():
    rng, direction = random.Random(1), torch.nn.functional.normalize(torch.randn(H), dim=0)

    def rare(i):  # one vote in eight is wrong, marked by its prompt state
        g, _ = planted(rng, direction)
        wrong = i % 8 == 0
        g.prompt_state = torch.randn(H) + (-2.0 if wrong else 2.0) * direction
        return g, "Bern" if wrong else "Oslo"

    probes = Probes(H, N, width=32, resp_width=32, seed=0)
    for step in range(40):
        probes.learn([Example.of(*rare(step * 8 + i)) for i in range(8)])
    test = [rare(i) for i in range(160)]
    p_right = probes.predict([g for g, _ in test])[0].tolist()
    assert auc(p_right, [label == "Oslo" for _, label in test]) > 0.85
    wrong = [p for p, (_, label) in zip(p_right, test) if label == "Bern"]
    assert sum(p < 0.5 for p in wrong) / len(wrong) > 0.6  # the rare class is predicted, not swamped

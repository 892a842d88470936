"""CARE's probes learn a planted signal of vote correctness from bought labels, their E[CAG]
follows CAG's closed form, and their state (networks, optimizer, replay buffer) survives a
checkpoint."""

import math
import random

import torch

from acquire.cag import cag_from_counts
from acquire.group import Group
from acquire.probes import Example, Probes, feasible
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
    probes = Probes(H, N, width=64, lr=1e-3, seed=0)
    test = [planted(rng, direction) for _ in range(200)]
    before = auc(probes.predict([g for g, _ in test])[0].tolist(), [label == "Oslo" for _, label in test])
    for _ in range(60):  # 60 training steps, 8 bought labels each
        probes.learn([Example.of(*planted(rng, direction)) for _ in range(8)])
    p_right = probes.predict([g for g, _ in test])[0].tolist()
    after = auc(p_right, [label == "Oslo" for _, label in test])
    assert after > 0.85 and after > before + 0.2, (before, after)

    torch.save(probes.state_dict(), tmp_path / "probes.pt")
    again = Probes(H, N, width=64, lr=1e-3, seed=1)
    again.load_state_dict(torch.load(tmp_path / "probes.pt", weights_only=False))
    assert torch.equal(again.predict([g for g, _ in test])[0], torch.tensor(p_right))
    assert len(again.buffer) == len(probes.buffer) == 480 and again.updates == 60
    probes.learn([]), again.learn([])  # the same next step: optimizer state and draw order restored
    assert all(torch.equal(a, b) for a, b in zip(probes.parameters(), again.parameters()))


def test_expected_cag_weighs_the_closed_form_by_the_probes_predictions():
    g = Group("p", vote(["Oslo"] * 4 + ["Bern"] * 3 + [None]), prompt_state=torch.randn(H),
              response_states=torch.randn(N, H), lengths=[5] * N)
    assert feasible(g).tolist() == [True, False, False, True] + [False] * 5  # y: 0 or Bern's 3
    probes = Probes(H, N, width=8)
    p_right, p_y = probes.predict([g])
    want = (1 - float(p_right[0])) * (float(p_y[0, 0]) * cag_from_counts(N, 4, 0) + float(p_y[0, 3]) * cag_from_counts(N, 4, 3))
    assert math.isclose(probes.expected_cag([g])[0], want, rel_tol=1e-6)
    mask = feasible(g)
    assert float(p_y[0][~mask].sum()) == 0.0 and math.isclose(float(p_y[0][mask].sum()), 1.0, rel_tol=1e-6)

"""CARE's two probes and their online training: small MLPs on the policy's hidden states and
the vote vector (acquire/group.py) that predict what a bought label would reveal.

- Stage 1: P(the vote is correct) from [prompt state, mean state of the vote's responses,
  vote vector], with an auxiliary head on each response's state predicting that response's
  correctness (trained alongside; it shapes the shared understanding of the states).
- Stage 2: y, the number of correct responses outside the vote when the vote is wrong, as a
  class over 0..n masked to its feasible values (0 and the sizes of the non-vote clusters).
- Score: E[CAG] = (1 - P(vote correct)) * sum_y P(y) * CAG(n, x, y) (acquire/cag.py).

`Probes.learn(examples)` adds bought labels to a replay buffer (2048 by default) and takes
`steps` optimizer steps on `draw` examples each (defaults as CARE's code: 3 steps of 16, Adam
lr 1e-4); `state_dict`/`load_state_dict` cover the networks, the optimizer and the buffer,
so the probes are checkpointed with the policy.

    probes = Probes(hidden=576, n=8)
    p_correct, p_y = probes.predict(groups)
    scores = probes.expected_cag(groups)
    p_right, gap_if_wrong = probes.gaps(groups)
    probes.learn([Example.of(group, true_label), ...])
    probes.learn_labels(groups, {prompt_id: bought_label})
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

import torch
from torch import nn

from acquire.cag import cag_from_counts
from acquire.group import Group, vote_features
from generators.vote import rewards


def _mlp(inp: int, out: int, width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(inp, width), nn.GELU(), nn.Linear(width, out))


@dataclass
class Example:
    """A bought label as probe targets: the features, whether the vote was right, y, and each
    response's correctness."""

    features: torch.Tensor
    response_states: torch.Tensor
    feasible: torch.Tensor  # [n + 1] bool
    vote_correct: float
    y: int  # -1: not one of the feasible values
    correct: torch.Tensor  # [n]

    @classmethod
    def of(cls, group: Group, label: str) -> "Example":
        r = rewards(group.vote, label, group.aliases)
        x = group.vote.members[0] if group.vote.members else ()
        vote_right = bool(x) and r[x[0]] == 1.0
        y, mask = 0 if vote_right else int(sum(r)), feasible(group)
        if not mask[y]:  # aliases made two clusters right: y is no single cluster, stage 2 skips it
            y = -1
        return cls(features(group), group.response_states.float(), mask, float(vote_right), y,
                   torch.tensor(r, dtype=torch.float32))


def features(group: Group) -> torch.Tensor:
    """[prompt state, mean state of the vote's responses, vote vector]."""
    if group.prompt_state is None or group.response_states is None:
        raise ValueError(f"group {group.prompt_id} has no hidden states (acquire.group.signals)")
    members = list(group.vote.members[0]) if group.vote.members else list(range(group.n))
    return torch.cat([group.prompt_state.float(), group.response_states[members].float().mean(0),
                      vote_features(group.vote, group.lengths or [0] * group.n)])


def feasible(group: Group) -> torch.Tensor:
    """[n + 1]: the values y can take (0 and each non-vote cluster's size)."""
    mask = torch.zeros(group.n + 1, dtype=torch.bool)
    mask[0] = True
    for size in group.vote.sizes[1:]:
        mask[size] = True
    return mask


class Probes(nn.Module):
    """Stage 1, its auxiliary head and stage 2 (module docstring), with their trainer."""

    def __init__(self, hidden: int, n: int, width: int = 256, lr: float = 1e-4, buffer: int = 2048,
                 steps: int = 3, draw: int = 16, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.hidden, self.n, self.steps, self.draw = hidden, n, steps, draw
        inp = 2 * hidden + 1 + 2 * n
        self.stage1, self.aux, self.stage2 = _mlp(inp, 1, width), _mlp(hidden, 1, width), _mlp(inp, n + 1, width)
        self.optimizer = torch.optim.Adam(self.parameters(), lr=lr)
        self.buffer: deque[Example] = deque(maxlen=buffer)
        self.rng = random.Random(seed)
        self.updates = 0

    def _y_logits(self, feats: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.stage2(feats).masked_fill(~mask, float("-inf"))

    @torch.no_grad()
    def predict(self, groups: list[Group]) -> tuple[torch.Tensor, torch.Tensor]:
        """([B] P(vote correct), [B, n + 1] P(y))."""
        feats = torch.stack([features(g) for g in groups])
        masks = torch.stack([feasible(g) for g in groups])
        return torch.sigmoid(self.stage1(feats)).squeeze(-1), torch.softmax(self._y_logits(feats, masks), -1)

    def gaps(self, groups: list[Group]) -> tuple[list[float], list[float]]:
        """Per group, P(vote correct) and E[CAG | vote wrong] = sum_y P(y) CAG(n, x, y) (stage 2's
        expectation alone: CARE's code weighs a trusted pseudo-label by it)."""
        p_right, p_y = self.predict(groups)
        out = []
        for g, py in zip(groups, p_y):
            x = g.vote.sizes[0] if g.vote.members else 0
            out.append(sum(float(py[y]) * cag_from_counts(g.n, x, min(y, g.n - x)) for y in range(g.n + 1) if py[y] > 0))
        return p_right.tolist(), out

    def expected_cag(self, groups: list[Group]) -> list[float]:
        """E[CAG] of each group under the probes: (1 - P(vote correct)) E[CAG | vote wrong]."""
        p_right, gap = self.gaps(groups)
        return [(1.0 - pr) * g for pr, g in zip(p_right, gap)]

    def loss(self, batch: list[Example]) -> torch.Tensor:
        feats = torch.stack([e.features for e in batch])
        s1 = self.stage1(feats).squeeze(-1)
        loss = nn.functional.binary_cross_entropy_with_logits(s1, torch.tensor([e.vote_correct for e in batch]))
        aux = self.aux(torch.cat([e.response_states for e in batch])).squeeze(-1)
        loss = loss + nn.functional.binary_cross_entropy_with_logits(aux, torch.cat([e.correct for e in batch]))
        wrong = [e for e in batch if not e.vote_correct and e.y >= 0]
        if wrong:
            logits = self._y_logits(torch.stack([e.features for e in wrong]), torch.stack([e.feasible for e in wrong]))
            loss = loss + nn.functional.cross_entropy(logits, torch.tensor([e.y for e in wrong]))
        return loss

    def learn(self, examples: list[Example]) -> float | None:
        """Add `examples` to the replay buffer, then `steps` steps on `draw` drawn examples; the last loss."""
        self.buffer.extend(examples)
        if not self.buffer:
            return None
        last = None
        for _ in range(self.steps):
            batch = self.rng.sample(list(self.buffer), min(self.draw, len(self.buffer)))
            loss = self.loss(batch)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            last = float(loss.detach())
        self.updates += 1
        return last

    def learn_labels(self, groups: list[Group], labels: dict[str, str]) -> float | None:
        """`learn` from the labels bought for some of `groups` ({prompt_id: label})."""
        by_id = {g.prompt_id: g for g in groups}
        return self.learn([Example.of(by_id[pid], label) for pid, label in labels.items()])

    def state_dict(self, *args, **kwargs) -> dict:  # the networks, the optimizer and the buffer
        return {"nets": super().state_dict(*args, **kwargs), "optimizer": self.optimizer.state_dict(),
                "buffer": list(self.buffer), "rng": self.rng.getstate(), "updates": self.updates}

    def load_state_dict(self, state: dict, strict: bool = True):
        result = super().load_state_dict(state["nets"], strict)
        self.optimizer.load_state_dict(state["optimizer"])
        self.buffer.clear()
        self.buffer.extend(state["buffer"])
        self.rng.setstate(state["rng"])
        self.updates = state["updates"]
        return result

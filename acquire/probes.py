"""CARE's two probes and their online training, as CARE's code builds them: small networks on
the policy's hidden states and the vote vector (acquire/group.py) that predict what a bought
label would reveal.

Both probes encode the prompt (its last-token state with the valid-answer ratio and the
sorted cluster sizes over n) and each response (its last-token state) separately, each
input batch-normalised first, and pool the responses' codes by their mean:
- Stage 1: P(the vote is correct) from [prompt code, mean response code] (each response's
  code also sees its length over 4000); an auxiliary head on [prompt code, response code]
  predicts each response's correctness, trained alongside.
- Stage 2: y, the number of correct responses outside the vote (0 when the vote is right),
  a class over 0..n masked to its feasible values (0 and the sizes of the non-vote
  clusters); its response codes are pooled over the answered responses outside the vote.
- Score (what CARE ranks by): the stage-2 expectation sum_y P(y) * cost(y), cost(y) the CAG
  if y responses outside the vote were right, on the rewards the step uses
  (acquire.cag.group_costs). Stage 1 gates: after the warm-up the share `gate` of a batch most
  likely voted right is never bought (acquire/strategies.py).

Training (defaults as CARE's configuration): each `learn(examples)` takes `steps` AdamW
steps (lr 1e-3, gradients clipped to norm 1) per stage on the new examples plus up to
`draw` (256) from the replay buffer (4096; stage 2's draw stratified by y), with
class-balanced cross-entropy (weights count^-0.5, normalised to mean 1, clipped to
[0.25, 4]); a batch of one example waits for the next (batch normalisation needs two).
`state_dict`/`load_state_dict` cover the networks, optimizers, buffer and draw order, so the
probes are checkpointed with the policy.

As in CARE's code, a right vote is stage 2's class y = 0, priced like a wrong vote that no
response outside it matches (CAG(n, x, 0)); the gate is what keeps likely-right votes out.
Differences from CARE's code: the response lengths are over 4000 tokens as there, but
generation here stops far earlier; features come from one teacher-forced pass
(acquire.group.signals), not the rollout engine's.

    probes = Probes(hidden=576, n=8)
    p_correct, p_y = probes.predict(groups)
    scores = probes.expected_cag(groups)
    probes.learn([Example.of(group, true_label), ...])
    probes.learn_labels(groups, {prompt_id: bought_label})
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

import torch
from torch import nn

from acquire.cag import group_costs
from acquire.group import Group
from generators.vote import rewards

LENGTH_SCALE = 4000.0  # CARE's response length normalisation


def _encoder(inp: int, width: int, out: int | None = None) -> nn.Module:
    layers = [nn.BatchNorm1d(inp), nn.Linear(inp, width), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(width, out), nn.GELU()) if out else nn.Sequential(*layers)


def _head(inp: int, width: int, out: int) -> nn.Module:
    return nn.Sequential(nn.BatchNorm1d(inp), nn.Linear(inp, width), nn.GELU(), nn.Linear(width, out))


@dataclass
class Example:
    """One group's probe inputs, and with a label its targets."""

    prompt: torch.Tensor  # [H + 1 + n]: prompt state, valid ratio, sorted cluster sizes / n
    responses: torch.Tensor  # [n, H]
    lengths: torch.Tensor  # [n], over LENGTH_SCALE, clipped to 1
    outside: torch.Tensor  # [n] bool: answered and outside the vote (stage 2's pool)
    feasible: torch.Tensor  # [n + 1] bool
    costs: torch.Tensor  # [n + 1]
    vote_correct: int = 0
    y: int = 0
    correct: torch.Tensor | None = None  # [n]

    @classmethod
    def inputs(cls, group: Group) -> "Example":
        if group.prompt_state is None or group.response_states is None:
            raise ValueError(f"group {group.prompt_id} has no hidden states (acquire.group.signals)")
        n = group.n
        sizes = sorted(group.vote.sizes, reverse=True)[:n] + [0] * max(0, n - len(group.vote.sizes))
        prompt = torch.cat([group.prompt_state.float(), torch.tensor([group.vote.valid] + [s / n for s in sizes])])
        lengths = torch.tensor((list(group.lengths) or [0] * n)[:n], dtype=torch.float32) / LENGTH_SCALE
        voted = set(group.vote.members[0]) if group.vote.members else set()
        outside = torch.tensor([a is not None and i not in voted and any(i in m for m in group.vote.members)
                                for i, a in enumerate(group.vote.answers)])
        return cls(prompt, group.response_states.float(), lengths.clamp(0, 1), outside, feasible(group),
                   torch.tensor(group_costs(group), dtype=torch.float32))

    @classmethod
    def of(cls, group: Group, label: str) -> "Example":
        """`group` with the targets a bought `label` reveals."""
        e = cls.inputs(group)
        r = rewards(group.vote, label, group.aliases)
        voted = group.vote.members[0] if group.vote.members else ()
        e.vote_correct = int(bool(voted) and r[voted[0]] == 1.0)
        e.y = 0 if e.vote_correct else min(int(sum(r)), group.n)
        e.feasible = e.feasible.clone()
        e.feasible[e.y] = True  # as CARE's trainer: the target is always a valid class
        e.correct = torch.tensor(r, dtype=torch.float32)
        return e


def feasible(group: Group) -> torch.Tensor:
    """[n + 1]: the values y can take (0 and each non-vote cluster's size)."""
    mask = torch.zeros(group.n + 1, dtype=torch.bool)
    mask[0] = True
    for size in group.vote.sizes[1:]:
        mask[size] = True
    return mask


def class_weights(targets: torch.Tensor, classes: int, power: float = 0.5, low: float = 0.25,
                  high: float = 4.0) -> torch.Tensor:
    """CARE's class balancing: count^-power normalised to mean 1 over the classes present,
    clipped to [low, high]; 0 for an absent class."""
    counts = torch.bincount(targets, minlength=classes).double()
    w = torch.zeros(classes, dtype=torch.float64)
    present = counts > 0
    w[present] = counts[present].pow(-power)
    w[present] = w[present] / w[present].mean()
    return w.clamp(low, high).masked_fill(~present, 0.0).float()


class Stage(nn.Module):
    """One probe: prompt encoder, per-response encoder, mean pooling, a head (and stage 1's
    auxiliary per-response head)."""

    def __init__(self, hidden: int, n: int, out: int, width: int, resp_width: int, lengths: bool, aux: bool) -> None:
        super().__init__()
        self.lengths = lengths
        self.prompt = _encoder(hidden + 1 + n, width)
        self.response = _encoder(hidden + int(lengths), resp_width, resp_width)
        self.head = _head(width + resp_width, width, out)
        self.aux = _head(width + resp_width, width, 2) if aux else None

    def forward(self, batch: list[Example], pool_outside: bool = False):
        b, n = len(batch), batch[0].responses.shape[0]
        prompt = self.prompt(torch.stack([e.prompt for e in batch]))
        resp = torch.stack([e.responses for e in batch])
        if self.lengths:
            resp = torch.cat([resp, torch.stack([e.lengths for e in batch])[..., None]], -1)
        if pool_outside:
            mask = torch.stack([e.outside for e in batch]).float()[..., None]
            codes = self.response((resp * mask).reshape(b * n, -1)).reshape(b, n, -1) * mask
            pooled = codes.sum(1) / mask.sum(1).clamp(min=1.0)
        else:
            codes = self.response(resp.reshape(b * n, -1)).reshape(b, n, -1)
            pooled = codes.mean(1)
        logits = self.head(torch.cat([prompt, pooled], -1))
        if self.aux is None:
            return logits, None
        both = torch.cat([prompt[:, None].expand(-1, n, -1), codes], -1)
        return logits, self.aux(both.reshape(b * n, -1)).reshape(b, n, 2)


class Probes(nn.Module):
    """Stage 1 (with its auxiliary head) and stage 2 (module docstring), with their trainer."""

    def __init__(self, hidden: int, n: int, width: int = 256, resp_width: int = 1024, lr: float = 1e-3,
                 buffer: int = 4096, steps: int = 1, draw: int = 256, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.hidden, self.n, self.steps, self.draw = hidden, n, steps, draw
        self.stage1 = Stage(hidden, n, 2, width, resp_width, lengths=True, aux=True)
        self.stage2 = Stage(hidden, n, n + 1, width, resp_width, lengths=False, aux=False)
        self.opt1 = torch.optim.AdamW(self.stage1.parameters(), lr=lr, weight_decay=0.0)
        self.opt2 = torch.optim.AdamW(self.stage2.parameters(), lr=lr, weight_decay=0.0)
        self.buffer: deque[Example] = deque(maxlen=buffer)
        self.rng = random.Random(seed)
        self.updates = 0
        self.eval()

    @torch.no_grad()
    def _predict(self, batch: list[Example]) -> tuple[torch.Tensor, torch.Tensor]:
        self.eval()
        p_right = torch.softmax(self.stage1(batch)[0], -1)[:, 1]
        logits = self.stage2(batch, pool_outside=True)[0]
        masks = torch.stack([e.feasible for e in batch])
        return p_right, torch.softmax(logits.masked_fill(~masks, -1e9), -1).masked_fill(~masks, 0.0)

    def predict(self, groups: list[Group]) -> tuple[torch.Tensor, torch.Tensor]:
        """([B] P(vote correct), [B, n + 1] P(y))."""
        return self._predict([Example.inputs(g) for g in groups])

    def gaps(self, groups: list[Group]) -> tuple[list[float], list[float]]:
        """Per group, P(vote correct) and the stage-2 expectation sum_y P(y) cost(y)."""
        batch = [Example.inputs(g) for g in groups]
        p_right, p_y = self._predict(batch)
        return p_right.tolist(), (p_y * torch.stack([e.costs for e in batch])).sum(-1).tolist()

    def expected_cag(self, groups: list[Group]) -> list[float]:
        """What CARE ranks by: the stage-2 expectation of each group's CAG."""
        return self.gaps(groups)[1]

    def _history(self, k: int, stratified: bool) -> list[Example]:
        pool = list(self.buffer)
        if k >= len(pool):
            return pool
        if not stratified:
            return self.rng.sample(pool, k)
        by_y: dict[int, list[Example]] = {}
        for e in pool:
            by_y.setdefault(e.y, []).append(e)
        buckets = [self.rng.sample(v, len(v)) for _, v in sorted(by_y.items())]
        share, picked, rest = max(1, k // len(buckets)), [], []
        for bucket in buckets:
            picked += bucket[:share]
            rest += bucket[share:]
        return (picked + self.rng.sample(rest, len(rest)))[:k]

    def loss(self, first: list[Example], second: list[Example]) -> tuple[torch.Tensor, torch.Tensor]:
        """(stage 1 + its auxiliary loss, stage 2's loss), class-balanced."""
        logits, aux = self.stage1(first)
        target = torch.tensor([e.vote_correct for e in first])
        loss1 = nn.functional.cross_entropy(logits, target, weight=class_weights(target, 2))
        loss1 = loss1 + nn.functional.cross_entropy(aux.reshape(-1, 2), torch.cat([e.correct for e in first]).long())
        logits2 = self.stage2(second, pool_outside=True)[0]
        masks = torch.stack([e.feasible for e in second])
        y = torch.tensor([e.y for e in second])
        loss2 = nn.functional.cross_entropy(logits2.masked_fill(~masks, -1e9), y, weight=class_weights(y, self.n + 1))
        return loss1, loss2

    def learn(self, examples: list[Example]) -> float | None:
        """`steps` steps on `examples` plus up to `draw` from the buffer, then buffer them; the
        last loss (None: fewer than two examples in all, kept for the next call)."""
        if len(examples) + len(self.buffer) < 2:
            self.buffer.extend(examples)
            return None
        self.train()
        last = None
        for _ in range(self.steps):
            first = list(examples) + self._history(self.draw, stratified=False)
            second = list(examples) + self._history(self.draw, stratified=True)
            loss1, loss2 = self.loss(first, second)
            for opt, loss, net in ((self.opt1, loss1, self.stage1), (self.opt2, loss2, self.stage2)):
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                opt.step()
            last = float(loss1.detach() + loss2.detach())
        self.eval()
        self.buffer.extend(examples)
        self.updates += 1
        return last

    def learn_labels(self, groups: list[Group], labels: dict[str, str]) -> float | None:
        """`learn` from the labels bought for some of `groups` ({prompt_id: label})."""
        by_id = {g.prompt_id: g for g in groups}
        return self.learn([Example.of(by_id[pid], label) for pid, label in labels.items()])

    def state_dict(self, *args, **kwargs) -> dict:  # the networks, the optimizers and the buffer
        return {"nets": super().state_dict(*args, **kwargs), "opt1": self.opt1.state_dict(),
                "opt2": self.opt2.state_dict(), "buffer": list(self.buffer), "rng": self.rng.getstate(),
                "updates": self.updates}

    def load_state_dict(self, state: dict, strict: bool = True):
        result = super().load_state_dict(state["nets"], strict)
        self.opt1.load_state_dict(state["opt1"])
        self.opt2.load_state_dict(state["opt2"])
        self.buffer.clear()
        self.buffer.extend(state["buffer"])
        self.rng.setstate(state["rng"])
        self.updates = state["updates"]
        return result

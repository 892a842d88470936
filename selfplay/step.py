"""The step function of the self-play updates (selfplay/update.py): a micro-batch of stored
samples (selfplay/samples.py) becomes a train.objective.RolloutBatch whose advantages were
computed beforehand (`meta["advantage"]`, given_advantages) and whose old log-probabilities
are the sampling policy's (`old_logprobs`, one pass without gradient before training); the
objective's terms (clipped surrogate, KL to a reference, KL to a teacher) give the loss.
Replayed demonstrations (`Sample.demo`, the examiner's `--demo-tasks` iteration) are not the
policy's samples: `SampledPG` is the clipped surrogate on the other rows only, and
`DemonstrationNLL` trains the demonstration rows by their tokens' negative log-likelihood.

    old_logprobs(model, samples, pad_id, batch_size=4)
    step = update_step(objective, pad_id)
    loss, stats = step(model, samples[:4])
"""

from __future__ import annotations

import torch

from train.losses import masked_mean
from train.objective import ClippedPG, RolloutBatch
from train.prefix import plain_token_logprobs
from train.rollout import Prompt


def _pad(rows: list[list[float]]) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([list(r) + [0.0] * (width - len(r)) for r in rows], dtype=torch.float32)


def _start(samples) -> int:
    return max(1, min(s.mask.index(1) for s in samples))


@torch.no_grad()
def old_logprobs(model, samples, pad_id: int, batch_size: int) -> None:
    """Set each sample's `old_logprobs`: its tokens' log-probabilities under `model` (the
    weights that sampled it), 0 off the policy's tokens."""
    was = model.training
    model.eval()
    try:
        for i in range(0, len(samples), max(1, batch_size)):
            part = samples[i:i + batch_size]
            lp = plain_token_logprobs(model, [s.input_ids for s in part], pad_id, start=_start(part))
            for s, row in zip(part, lp.cpu().tolist()):
                s.old_logprobs = [v if m else 0.0 for v, m in zip(row, s.mask)]
    finally:
        model.train(was)


def batch_of(samples, pad_id: int) -> RolloutBatch:
    """The RolloutBatch of a micro-batch (group size 1: the advantages are already grouped)."""
    seqs = [s.input_ids for s in samples]
    start = _start(samples)
    prompts = [Prompt([], "", key=s.rollout_id, meta={"advantage": s.advantage, "demo": s.demo}) for s in samples]
    old = None if any(s.old_logprobs is None for s in samples) else _pad([s.old_logprobs for s in samples])
    return RolloutBatch(prompts, seqs, _pad([s.mask for s in samples]), torch.tensor([s.reward for s in samples]),
                        1, pad_id, lambda m: plain_token_logprobs(m, seqs, pad_id, start=start), old)


def demo_rows(batch: RolloutBatch) -> torch.Tensor:
    """[N, 1]: 1 on the rows of replayed demonstrations, 0 on the policy's own samples."""
    return torch.tensor([[float(p.meta.get("demo", False))] for p in batch.prompts])


class SampledPG(ClippedPG):
    """The clipped surrogate on the policy's own samples only: 0 on demonstration rows, so a
    replayed conversation never adds a policy-gradient term (stat `demo_rows`)."""

    def __call__(self, batch: RolloutBatch, pol) -> tuple[torch.Tensor, dict]:
        own = 1.0 - demo_rows(batch).to(pol.logprobs.device)
        pg, stats = super().__call__(batch, pol)
        return pg * own, {**stats, "demo_rows": float((1.0 - own).sum())}


class DemonstrationNLL:
    """-log p(token) on the policy tokens of demonstration rows (0 elsewhere); stat `demo_nll`,
    the mean over those tokens."""

    def __init__(self, coef: float) -> None:
        self.coef = coef

    def __call__(self, batch: RolloutBatch, pol) -> tuple[torch.Tensor, dict]:
        demo = demo_rows(batch).to(pol.logprobs.device)
        nll = -pol.logprobs * demo
        mask = batch.mask.to(nll.device) * demo
        return nll, {"demo_nll": float(masked_mean(nll.detach(), mask)) if bool(mask.any()) else 0.0}


def update_step(objective, pad_id: int):
    """The Trainer step function: (model, samples) -> (loss, stats with `tokens`, `reward`)."""
    def step(model, samples) -> tuple[torch.Tensor, dict]:
        batch = batch_of(samples, pad_id)
        loss, stats = objective(model, batch)
        stats.update(tokens=float(batch.mask.sum()), reward=float(batch.rewards.mean()),
                     advantage_abs=sum(abs(s.advantage) for s in samples) / len(samples))
        return loss, stats

    return step


def workload(samples, batch_size: int, frozen: list, teacher: bool = False):
    """The largest micro-batch for the memory plan: `batch_size` of the longest samples padded,
    plus a forward pass of each frozen model (reference, teacher) over them; with a `teacher`,
    a second student pass and its whole-vocabulary logits at the policy's tokens."""
    from train.memory import ModelShape, Workload

    longest = sorted(samples, key=lambda s: len(s.input_ids), reverse=True)[:batch_size]
    tokens = len(longest) * len(longest[0].input_ids)
    policy = sum(sum(s.mask) for s in longest)
    return Workload(tokens, policy, f"{len(longest)} rollouts of up to {len(longest[0].input_ids)} tokens a micro-batch",
                    "--batch-size, --max-len or --train-layers", passes=1 + bool(teacher),
                    full_logits=policy if teacher else 0, frozen=[(ModelShape.of(f), tokens) for f in frozen])

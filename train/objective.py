"""The policy-gradient objective as parts: an advantage function, optional per-prompt weights on
the advantages, and loss terms, each a small object with one shape, composed by `Objective`.
GRPO (train/grpo.py) uses the default parts; a stage that needs more adds parts instead of
copying the step (a student with a teacher, an examiner with hop-grouped advantages,
label-aware weights).

    advantage(batch) -> [N]                      grpo_advantages, hop_advantages (ADVANTAGES), given_advantages
    weights(batch) -> [B]                        prompt_weights: one weight per prompt, >= 0
    term(batch, policy) -> ([N, T], stats)       ClippedPG, KLToReference, ReverseKLToTeacher

Every term returns a per-token loss; the objective sums them, each times its `coef`, and
aggregates once over the policy's tokens (`aggregate`, train.losses.AGGREGATES), so with the
default "token-mean" the loss is a mean over policy tokens, what the Trainer's `tokens` loss
weight expects (train/trainer.py). The default objective, clipped PG plus `kl_coef` times
the k3 KL to a frozen copy of the start model, gives the loss and gradients of
train.losses.clipped_surrogate.

    objective = Objective(hop_advantages, [ClippedPG(0.2), KLToReference(frozen_copy(model), 0.04),
                                           ReverseKLToTeacher(teacher, 0.5, teacher_prefix)],
                          weights=prompt_weights)
    loss, stats = objective(model, batch)       # batch: a RolloutBatch (GRPOSession.step builds it)

Per-prompt data comes from `Prompt.meta` (train/rollout.py): "hop_count" for hop-grouped
advantages, "weight" for prompt weights; a teacher's own prompt comes from a function of
the Prompt. Tests: tests/train/test_objective.py (every part on, against a hand-assembled sum).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from train.losses import (aggregate_tokens, clipped_pg, group_advantages, hop_grouped_advantages, k3_kl,
                          masked_mean, pg_stats, reverse_kl, weighted_advantages)
from train.packing import SCALED_LOGITS, model_inputs
from train.rollout import Prompt


@dataclass
class RolloutBatch:
    """N = B prompts x `group_size` rollouts (a group's rows consecutive), right-padded to T."""

    prompts: list[Prompt]  # [N]: each prompt repeated group_size times
    seqs: list[list[int]]  # [N] token ids: prompt + completion (policy and tool tokens)
    mask: torch.Tensor  # [N, T] 1 on the policy's tokens, 0 on prompt, tool output and padding
    rewards: torch.Tensor  # [N]
    group_size: int
    pad_id: int
    logprobs: Callable[[Any], torch.Tensor]  # model -> [N, T] log-probs of `seqs` (0 off the mask)
    old_logprobs: torch.Tensor | None = None  # of the sampling policy; None: the current, detached

    def prompt_lens(self) -> list[int]:
        """Per row, the position of the first policy token (what precedes it is the prompt)."""
        return [int(row.nonzero()[0]) if bool(row.any()) else len(s) for row, s in zip(self.mask, self.seqs)]

    def per_prompt(self, key: str) -> list:
        """`Prompt.meta[key]` of each of the B prompts; a readable error when one lacks it."""
        out = []
        for p in self.prompts[::self.group_size]:
            if key not in p.meta:
                raise ValueError(f"prompt {p.key or p.messages[-1:]} has no {key!r} in its meta")
            out.append(p.meta[key])
        return out


@dataclass
class Policy:
    """What the terms see of the policy: the model, its log-probs, the old ones, the advantages."""

    model: Any
    logprobs: torch.Tensor  # [N, T], with gradient
    old_logprobs: torch.Tensor  # [N, T]
    advantages: torch.Tensor  # [N]
    aggregate: str


# ---- advantages --------------------------------------------------------------------------------

def grpo_advantages(batch: RolloutBatch) -> torch.Tensor:
    """Rewards normalised within each group of `group_size` rollouts of one prompt."""
    return group_advantages(batch.rewards.view(-1, batch.group_size)).reshape(-1)


def hop_advantages(batch: RolloutBatch) -> torch.Tensor:
    """HRPO: rewards normalised among all rollouts whose prompt has the same `meta["hop_count"]`."""
    hops = torch.tensor(batch.per_prompt("hop_count")).repeat_interleave(batch.group_size)
    return hop_grouped_advantages(batch.rewards, hops)


def given_advantages(batch: RolloutBatch) -> torch.Tensor:
    """Advantages computed before the step over a larger set than a batch (self-play's HRPO
    over a whole iteration's examiner outputs): each prompt's `meta["advantage"]`."""
    return torch.tensor(batch.per_prompt("advantage"), dtype=torch.float32).repeat_interleave(batch.group_size)


def prompt_weights(batch: RolloutBatch) -> torch.Tensor:
    """CARE: one weight per prompt, `meta["weight"]` (e.g. 1 bought label, clip(E[CAG], 0, 1)
    pseudo-label, 0 otherwise)."""
    return torch.tensor(batch.per_prompt("weight"), dtype=torch.float32)


# what GRPO's --advantage names (given_advantages needs a stage that computes them first)
ADVANTAGES: dict[str, Callable[[RolloutBatch], torch.Tensor]] = {"grpo": grpo_advantages, "hop-grouped": hop_advantages}


def advantage_fn(name: str) -> Callable[[RolloutBatch], torch.Tensor]:
    if name not in ADVANTAGES:
        raise ValueError(f"--advantage must be one of {', '.join(ADVANTAGES)}, not {name!r}")
    return ADVANTAGES[name]


# ---- loss terms --------------------------------------------------------------------------------

class ClippedPG:
    """The clipped surrogate pg_t (train.losses.clipped_pg); stats pg_loss, clip_frac, ratio_mean."""

    def __init__(self, clip_eps: float = 0.2, clip_eps_high: float | None = None, coef: float = 1.0) -> None:
        self.clip_eps, self.clip_eps_high, self.coef = clip_eps, clip_eps_high, coef

    def __call__(self, batch: RolloutBatch, pol: Policy) -> tuple[torch.Tensor, dict]:
        pg, ratio, clipped = clipped_pg(pol.logprobs, pol.old_logprobs, pol.advantages, self.clip_eps,
                                        self.clip_eps_high)
        return pg, pg_stats(pg, ratio, clipped, batch.mask.to(pg.device), pol.aggregate)


class KLToReference:
    """k3 estimate of KL(policy || reference) per token, the reference frozen (stat `kl`)."""

    def __init__(self, reference: torch.nn.Module, coef: float) -> None:
        self.reference, self.coef = reference, coef

    def __call__(self, batch: RolloutBatch, pol: Policy) -> tuple[torch.Tensor, dict]:
        with torch.no_grad():
            ref = batch.logprobs(self.reference)
        kl = k3_kl(pol.logprobs, ref)
        return kl, {"kl": float(masked_mean(kl.detach(), batch.mask.to(kl.device)))}


class ReverseKLToTeacher:
    """Per-token KL(student || teacher) over the full vocabulary on the policy's tokens, the
    teacher detached (stats `teacher_kl`, and `teacher_s`: seconds of the teacher's pass).
    `teacher_prefix(prompt)` gives the teacher's own prompt tokens (ending where the completion
    starts, e.g. with the assistant header): the teacher reads that prompt followed by the same
    completion tokens. None: the student's prompt.
    Logits are computed only at the policy's tokens (`masked_logits`); this costs one more
    forward pass of the student and one of the teacher."""

    def __init__(self, teacher: torch.nn.Module, coef: float,
                 teacher_prefix: Callable[[Prompt], list[int]] | None = None) -> None:
        self.teacher, self.coef, self.teacher_prefix = teacher, coef, teacher_prefix

    def teacher_inputs(self, batch: RolloutBatch) -> tuple[list[list[int]], torch.Tensor]:
        """The teacher's sequences and their policy-token mask (same tokens, same order)."""
        if self.teacher_prefix is None:
            return batch.seqs, batch.mask
        seqs, rows = [], []
        for p, s, m, n in zip(batch.prompts, batch.seqs, batch.mask.tolist(), batch.prompt_lens()):
            prefix = list(self.teacher_prefix(p))
            if not prefix:
                raise ValueError("the teacher's prompt is empty")
            seqs.append(prefix + s[n:])
            rows.append([0.0] * len(prefix) + m[n:len(s)])
        width = max(map(len, rows))
        return seqs, torch.tensor([r + [0.0] * (width - len(r)) for r in rows])

    def __call__(self, batch: RolloutBatch, pol: Policy) -> tuple[torch.Tensor, dict]:
        mask = batch.mask.to(pol.logprobs.device)
        student = masked_logits(pol.model, batch.seqs, mask, batch.pad_id)
        seqs, tmask = self.teacher_inputs(batch)
        started = time.perf_counter()
        with torch.no_grad():
            teacher = masked_logits(self.teacher, seqs, tmask, batch.pad_id)
        teacher_s = time.perf_counter() - started
        kl = reverse_kl(student, teacher)  # [M], one per policy token
        per_token = torch.zeros(mask.shape, dtype=kl.dtype, device=kl.device).index_put(
            mask.bool().nonzero(as_tuple=True), kl)
        return per_token, {"teacher_kl": float(kl.detach().mean()) if kl.numel() else 0.0, "teacher_s": teacher_s}


def masked_logits(model, seqs: list[list[int]], mask: torch.Tensor, pad_id: int) -> torch.Tensor:
    """[M, V] logits predicting each token where `mask` ([N, T]) is 1, in row-major order: the
    vocabulary projection is applied to those M positions' hidden states only (the rows packed
    into one when the model runs packed attention, train/packing.py). Models whose logits are
    more than the output layer (soft-capping, scaling) project every position."""
    dev = next(model.parameters()).device
    sel = mask.to(dev).bool()
    if bool(sel[:, 0].any()):
        raise ValueError("token 0 has no logits predicting it")
    inputs = model_inputs(model, seqs, pad_id)
    rows, cols = inputs.at(*sel.nonzero(as_tuple=True))
    cols = cols - 1
    head = model.get_output_embeddings()
    if head is None or any(getattr(model.config, k, None) for k in SCALED_LOGITS):
        return model(**inputs.kwargs).logits[rows, cols]
    from train.shard import in_forward

    return in_forward(model, lambda: head(model.base_model(**inputs.kwargs).last_hidden_state[rows, cols]))


# ---- the objective -------------------------------------------------------------------------------

Term = Callable[[RolloutBatch, Policy], "tuple[torch.Tensor, dict]"]  # and a float `coef` attribute


@dataclass
class Objective:
    """advantage (+ weights) -> policy log-probs -> sum of coef * term, aggregated once."""

    advantage: Callable[[RolloutBatch], torch.Tensor]
    terms: list[Term]
    weights: Callable[[RolloutBatch], torch.Tensor] | None = None
    aggregate: str = "token-mean"

    def advantages(self, batch: RolloutBatch) -> torch.Tensor:
        adv = self.advantage(batch)
        if self.weights is None:
            return adv
        return weighted_advantages(adv.view(-1, batch.group_size), self.weights(batch)).reshape(-1)

    def __call__(self, model, batch: RolloutBatch) -> tuple[torch.Tensor, dict]:
        adv = self.advantages(batch)
        logp = batch.logprobs(model)
        old = logp.detach() if batch.old_logprobs is None else batch.old_logprobs.to(logp.device)
        pol = Policy(model, logp, old, adv.to(logp.device), self.aggregate)
        per_token, stats = None, {}
        for term in self.terms:
            values, st = term(batch, pol)
            values = values if term.coef == 1 else term.coef * values
            per_token = values if per_token is None else per_token + values
            stats.update(st)
        return aggregate_tokens(per_token, batch.mask.to(logp.device), self.aggregate), stats

    def frozen(self) -> list[torch.nn.Module]:
        """The models the terms read beside the policy, forward only: a KL reference, a teacher."""
        return [t.reference if isinstance(t, KLToReference) else t.teacher for t in self.terms
                if isinstance(t, (KLToReference, ReverseKLToTeacher))]


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` in eval mode without gradients (a reference, or a teacher to update by EMA)."""
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def grpo_objective(cfg, model) -> Objective:
    """GRPO from a GRPOConfig: `advantage` by name, clipped PG, the KL to a frozen copy of
    `model` when `kl_coef` > 0, and per-prompt weights with `labels` (label-aware GRPO,
    train/labelled.py)."""
    terms: list[Term] = [ClippedPG(cfg.clip_eps)]
    if cfg.kl_coef > 0:
        terms.append(KLToReference(frozen_copy(model), cfg.kl_coef))
    weights = prompt_weights if getattr(cfg, "labels", "") else None
    return Objective(advantage_fn(getattr(cfg, "advantage", "grpo")), terms, weights)

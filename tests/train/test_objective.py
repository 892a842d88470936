"""The composable policy-gradient objective (train/objective.py) on a tiny random Llama: with
every part switched on (hop-grouped advantages, per-prompt weights, clipped PG with active
clipping, k3 KL to a reference, reverse KL to a teacher that reads a different prompt) the
loss and every parameter's gradient equal a sum assembled by hand from train/losses.py, the
teacher's logits aligned to the student's tokens by hand; and GRPO's default objective gives
the loss, gradients and stats of clipped_surrogate."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.train.test_prefix import assert_grads_close
from train.configs import GRPOConfig
from train.losses import (clipped_surrogate, group_advantages, hop_grouped_advantages, masked_mean, reverse_kl,
                          weighted_advantages)
from train.objective import (ClippedPG, KLToReference, Objective, ReverseKLToTeacher, RolloutBatch, advantage_fn,
                             frozen_copy, grpo_advantages, grpo_objective, hop_advantages, prompt_weights)
from train.prefix import pad_ids, plain_token_logprobs
from train.rollout import Prompt

G, START = 2, 6  # rollouts per prompt; the shortest student prompt
PROMPT_LENS, TEACHER_LENS = (9, 6, 11), (13, 4, 8)  # the teacher's prompts differ in length
HOPS, WEIGHTS = (2, 2, 3), (1.0, 0.4, 0.7)  # prompts 0 and 1 form one hop group
REWARDS = [1.0, 0.0, 0.5, 0.2, 0.9, 0.1]


def load(model_dir, noise_seed: int | None = None):
    """The tiny Llama; with a seed, every weight moved by 0.05 * N(0, 1) (a different model)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).train()
    if noise_seed is not None:
        g = torch.Generator().manual_seed(noise_seed)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model


def make_batch(vocab: int, old_logprobs_of=None) -> tuple[RolloutBatch, dict]:
    """3 prompts x 2 rollouts: prompt, policy tokens, tool output (mask 0), policy tokens."""
    g = torch.Generator().manual_seed(0)

    def toks(n: int) -> list[int]:
        return torch.randint(10, vocab, (n,), generator=g).tolist()

    prompts, seqs, masks, teacher_heads = [], [], [], {}
    for b, plen in enumerate(PROMPT_LENS):
        p = Prompt([{"role": "user", "content": f"q{b}"}], "a", key=f"p{b}",
                   meta={"hop_count": HOPS[b], "weight": WEIGHTS[b]})
        head, teacher_heads[p.key] = toks(plen), toks(TEACHER_LENS[b])
        for k in range(G):
            said, tool, more = toks(3 + k + b), toks(4), toks(2 + 2 * k)
            prompts.append(p)
            seqs.append(head + said + tool + more)
            masks.append([0] * plen + [1] * len(said) + [0] * len(tool) + [1] * len(more))
    width = max(map(len, seqs))
    mask = torch.tensor([m + [0] * (width - len(m)) for m in masks], dtype=torch.float32)
    batch = RolloutBatch(prompts, seqs, mask, torch.tensor(REWARDS), G, 0,
                         lambda m: plain_token_logprobs(m, seqs, 0, start=START))
    if old_logprobs_of is not None:  # a sampling policy a little off the current one: clipping is active
        with torch.no_grad():
            lp = batch.logprobs(old_logprobs_of)
        batch.old_logprobs = lp + 0.4 * torch.randn(lp.shape, generator=g) * mask
    return batch, teacher_heads


def shifted_logits(model, seqs: list[list[int]]) -> torch.Tensor:
    """[N, W, V]: column t holds the logits that predict token t (every position projected)."""
    ids, att = pad_ids(seqs, 0, max(map(len, seqs)))
    logits = model(input_ids=ids, attention_mask=att).logits
    return torch.cat([torch.zeros_like(logits[:, :1]), logits[:, :-1]], dim=1)


def grads_of(model, loss: torch.Tensor) -> dict:
    loss.backward()
    out = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return out


@pytest.fixture(scope="module")
def models(tiny_llama_dir):
    student = load(tiny_llama_dir)
    return student, frozen_copy(load(tiny_llama_dir, 1)), frozen_copy(load(tiny_llama_dir, 2))


def test_every_part_on_equals_the_hand_assembled_sum(models):
    student, ref, teacher = models
    batch, heads = make_batch(student.config.vocab_size, old_logprobs_of=student)
    objective = Objective(hop_advantages, [ClippedPG(0.2), KLToReference(ref, 0.05),
                                           ReverseKLToTeacher(teacher, 0.3, lambda p: heads[p.key])],
                          weights=prompt_weights)
    loss, stats = objective(student, batch)
    got = grads_of(student, loss)

    # by hand: advantages, PG + k3 KL in one clipped_surrogate call, reverse KL on full logits
    hops = torch.tensor(HOPS).repeat_interleave(G)
    adv = weighted_advantages(hop_grouped_advantages(batch.rewards, hops).view(-1, G), torch.tensor(WEIGHTS))
    adv = adv.reshape(-1)
    mask, seqs = batch.mask, batch.seqs
    logp = plain_token_logprobs(student, seqs, 0, start=START)
    with torch.no_grad():
        ref_logp = plain_token_logprobs(ref, seqs, 0, start=START)
    pg_kl, _ = clipped_surrogate(logp, batch.old_logprobs, adv, mask, clip_eps=0.2, ref_logprobs=ref_logp,
                                 kl_coef=0.05)
    student_logits = shifted_logits(student, seqs)
    teacher_logits = torch.zeros_like(student_logits)
    for i, (p, s, plen) in enumerate(zip(batch.prompts, seqs, [PROMPT_LENS[b] for b in range(3) for _ in range(G)])):
        own = heads[p.key] + s[plen:]  # the teacher's prompt, then the same completion tokens
        with torch.no_grad():
            t = shifted_logits(teacher, [own])[0]
        teacher_logits[i, plen:len(s)] = t[len(heads[p.key]):len(own)]
    teacher_kl = masked_mean(reverse_kl(student_logits, teacher_logits, mask), mask)
    want_loss = pg_kl + 0.3 * teacher_kl
    want = grads_of(student, want_loss)

    torch.testing.assert_close(loss.detach(), want_loss.detach(), rtol=1e-5, atol=1e-6)
    assert_grads_close(got, want)
    torch.testing.assert_close(objective.advantages(batch), adv)
    assert not torch.allclose(adv, grpo_advantages(batch))  # hop groups span prompts 0 and 1
    assert stats["clip_frac"] > 0 and stats["kl"] > 0
    assert stats["teacher_kl"] == pytest.approx(float(teacher_kl.detach()), rel=1e-5)


def test_default_grpo_objective_is_clipped_surrogate_with_k3_kl(tiny_llama_dir):
    policy = load(tiny_llama_dir)
    objective = grpo_objective(GRPOConfig(kl_coef=0.05, clip_eps=0.2), policy)  # the reference: a copy now
    with torch.no_grad():  # the policy moves away from its reference (else k3 and its gradient are 0)
        policy.load_state_dict(load(tiny_llama_dir, 3).state_dict())
    batch, _ = make_batch(policy.config.vocab_size)
    loss, stats = objective(policy, batch)
    got = grads_of(policy, loss)

    logp = plain_token_logprobs(policy, batch.seqs, 0, start=START)
    with torch.no_grad():
        ref = plain_token_logprobs(objective.terms[1].reference, batch.seqs, 0, start=START)
    adv = group_advantages(batch.rewards.view(-1, G)).reshape(-1)
    want_loss, want_stats = clipped_surrogate(logp, logp.detach(), adv, batch.mask, clip_eps=0.2, ref_logprobs=ref,
                                              kl_coef=0.05)
    want = grads_of(policy, want_loss)
    torch.testing.assert_close(loss.detach(), want_loss.detach(), rtol=1e-6, atol=1e-7)
    assert_grads_close(got, want)
    assert stats == pytest.approx(want_stats) and stats["kl"] > 0


def test_parts_are_picked_by_name_and_missing_meta_is_a_readable_error(models):
    student = models[0]
    assert grpo_objective(GRPOConfig(advantage="hop-grouped"), student).advantage is hop_advantages
    assert [type(t) for t in grpo_objective(GRPOConfig(), student).terms] == [ClippedPG]  # kl_coef 0: no reference
    with pytest.raises(ValueError, match="--advantage must be one of grpo, hop-grouped, not 'hops'"):
        advantage_fn("hops")
    batch, _ = make_batch(student.config.vocab_size)
    for p in batch.prompts:
        p.meta.pop("hop_count", None)
    with pytest.raises(ValueError, match="prompt p0 has no 'hop_count'"):
        hop_advantages(batch)

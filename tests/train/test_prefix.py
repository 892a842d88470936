"""Shared-prefix grouping (train/prefix.py) against the plain teacher-forced path on a tiny random
Llama: log-probabilities, the GRPO loss and every parameter's gradient agree for groups whose
continuations differ in length; and GRPO's detached "old" log-probabilities (no scoring pass)
give the same loss and gradients as the scored ones."""

import pytest
import torch

from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401 (fixtures)
from tests.train.test_rollout import world  # noqa: F401 (module fixture: a small world dataset)
from train.losses import clipped_surrogate
from train.prefix import grouped_token_logprobs, plain_token_logprobs, shared_prefix_len

RTOL, ATOL = 1e-5, 1e-7


def assert_grads_close(got: dict, want: dict) -> None:
    """Every gradient within 1e-5 relative, elements near 0 within 1e-5 of the tensor's largest."""
    assert got.keys() == want.keys()
    for name, g in want.items():
        scale = float(g.abs().max())
        assert scale > 0, name  # every parameter is reached
        torch.testing.assert_close(got[name], g, rtol=RTOL, atol=RTOL * scale, msg=lambda m: f"{name}: {m}")


@pytest.fixture(scope="module")
def model(tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    return m.train()  # as in training (the tiny Llama has no dropout)


def _groups(model, prompt_lens=(40, 23), cont_lens=(7, 12, 3, 1), seed=0):
    """Consecutive groups: each group's rows = its prompt + a random continuation (lengths vary)."""
    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    seqs, starts = [], []
    for p in prompt_lens:
        prompt = torch.randint(10, vocab, (p,), generator=g).tolist()
        for c in cont_lens:
            seqs.append(prompt + torch.randint(10, vocab, (c,), generator=g).tolist())
        starts.append(p)
    return seqs, min(starts)


def _mask(seqs, start):
    width = max(map(len, seqs))
    return torch.tensor([[float(start <= t < len(s)) for t in range(width)] for s in seqs])


def _loss_and_grads(model, fn, seqs, start, adv, old=None):
    model.zero_grad(set_to_none=True)
    logp = fn()
    mask = _mask(seqs, start)
    loss, _ = clipped_surrogate(logp, logp.detach() if old is None else old, adv, mask,
                                ref_logprobs=logp.detach() + 0.1, kl_coef=0.05)
    loss.backward()
    return logp.detach(), loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_shared_prefix_len_leaves_one_token():
    assert shared_prefix_len([[1, 2, 3, 4], [1, 2, 5]]) == 2
    assert shared_prefix_len([[1, 2, 3], [1, 2, 3]]) == 2  # identical rows keep a continuation
    assert shared_prefix_len([[1, 2], [3, 4]]) == 0


def test_logprobs_equal_plain_path(model):
    seqs, _ = _groups(model)
    with torch.no_grad():
        full = plain_token_logprobs(model, seqs, pad_id=0)
        grouped = grouped_token_logprobs(model, seqs, pad_id=0, group_size=4)
    assert grouped.shape == full.shape == (8, 52)
    assert bool((full != 0).sum(1).eq(torch.tensor([len(s) - 1 for s in seqs])).all())  # every real token
    torch.testing.assert_close(grouped, full, rtol=RTOL, atol=1e-5)
    # from `start` on only: earlier columns are 0, later ones unchanged
    with torch.no_grad():
        late = grouped_token_logprobs(model, seqs, pad_id=0, group_size=4, start=30)
        late_plain = plain_token_logprobs(model, seqs, pad_id=0, start=30)
    assert bool((late[:, :30] == 0).all()) and bool((late_plain[:, :30] == 0).all())
    torch.testing.assert_close(late[:, 30:], full[:, 30:], rtol=RTOL, atol=1e-5)
    torch.testing.assert_close(late_plain, late, rtol=RTOL, atol=1e-5)


@pytest.mark.parametrize("start_at_prompt", [True, False])
def test_loss_and_every_gradient_equal_plain_path(model, start_at_prompt):
    seqs, prompt = _groups(model)
    start = prompt if start_at_prompt else 5  # 5: log-probabilities of prompt tokens are needed too
    adv = torch.tensor([1.0, -0.5, 0.25, -0.75, 0.3, -1.2, 0.9, 0.0])
    lp_a, loss_a, grads_a = _loss_and_grads(model, lambda: plain_token_logprobs(model, seqs, 0), seqs, start, adv)
    lp_b, loss_b, grads_b = _loss_and_grads(
        model, lambda: grouped_token_logprobs(model, seqs, 0, group_size=4, start=start), seqs, start, adv)
    assert float(loss_a) != 0.0
    torch.testing.assert_close(loss_b, loss_a, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(lp_b[:, start:], lp_a[:, start:], rtol=RTOL, atol=1e-5)
    assert_grads_close(grads_b, grads_a)


def test_groups_without_shared_prefix_fall_back(model):
    seqs = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16], [17, 18]]  # no common first token
    with torch.no_grad():
        torch.testing.assert_close(grouped_token_logprobs(model, seqs, 0, group_size=2),
                                   plain_token_logprobs(model, seqs, 0), rtol=RTOL, atol=1e-5)
    with pytest.raises(ValueError, match="groups of 3"):
        grouped_token_logprobs(model, seqs, 0, group_size=3)


def test_detached_old_logprobs_equal_scored_ones(model, tiny_llama_dir):
    """GRPO skips the scoring pass after sampling: old = current logprobs detached. With old
    logprobs scored by the rollout backend instead, loss and gradients are the same."""
    from generators.llm.transformers_backend import TransformersBackend

    be = TransformersBackend(tiny_llama_dir)
    be.lm = model
    seqs, prompt = _groups(model, prompt_lens=(30,), cont_lens=(6, 9, 2))
    scored = be.score([s[:1] for s in seqs], [s[1:] for s in seqs])
    width = max(map(len, seqs))
    old = torch.tensor([[0.0] + lp + [0.0] * (width - len(lp) - 1) for lp in scored])
    adv = torch.tensor([1.0, -0.2, -0.8])
    fn = lambda: grouped_token_logprobs(model, seqs, 0, group_size=3, start=prompt)  # noqa: E731
    _, loss_a, grads_a = _loss_and_grads(model, fn, seqs, prompt, adv, old=old)
    _, loss_b, grads_b = _loss_and_grads(model, fn, seqs, prompt, adv)
    torch.testing.assert_close(loss_b, loss_a, rtol=RTOL, atol=ATOL)
    assert_grads_close(grads_b, grads_a)


def test_grpo_step_same_loss_and_gradients_with_and_without_grouping(model, tiny_llama_dir, world):  # noqa: F811
    """GRPOSession.step end to end (scripted rollouts, KL to the frozen start model)."""
    from tests.train.test_rollout import Scripted
    from train.grpo import GRPOConfig, build_session

    root, triples, _ = world
    gold = triples[0]["answer"]
    got = []
    for on in (False, True):
        cfg = GRPOConfig(data="w", group_size=2, limit=2, max_turns=1, max_new_tokens=8, kl_coef=0.05,
                         prefix_grouping=on)
        session = build_session(root, cfg, tiny_llama_dir, model)
        session.backend = Scripted(tiny_llama_dir, [[f"<think>x</think><answer>{gold}</answer>",
                                                     "<think>y</think><answer>nobody</answer>"]])
        prompts = session.prompts[:2]
        for pr in prompts:  # a short system prompt (the tool bank's is ~3600 tokens): a cheap test
            pr.messages = [{"role": "system", "content": "Answer in <answer> tags."}] + pr.messages[1:]
        model.zero_grad(set_to_none=True)
        loss, stats = session.step(model, prompts)
        loss.backward()
        got.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    assert float(got[0][0]) != 0.0 and stats["ratio_mean"] == 1.0
    torch.testing.assert_close(got[1][0], got[0][0], rtol=RTOL, atol=ATOL)
    assert_grads_close(got[1][1], got[0][1])

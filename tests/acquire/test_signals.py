"""The strategies' model-side signals (acquire/group.py `signals`): encoding the prompt once and
continuing each response from its cut-back cache gives what one full forward pass per
response gives (hidden states, masked token log-probabilities, self-certainty), for responses
of different lengths, an empty one, and a mask that leaves tool output out."""

from __future__ import annotations

import math

import pytest
import torch

from acquire.group import scorer, signals
from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401


def direct(model, prompt, resp, mask):
    """One full forward pass over prompt + response (what the cache must reproduce)."""
    ids = torch.tensor([prompt + resp])
    out = model(input_ids=ids, output_hidden_states=True)
    hidden = out.hidden_states[-1][0]
    lp = torch.log_softmax(out.logits[0, len(prompt) - 1:-1].float(), dim=-1)
    keep = torch.tensor(mask, dtype=torch.bool)
    token_lp = lp.gather(1, ids[0, len(prompt):, None]).squeeze(1)[keep]
    certainty = (-math.log(lp.shape[-1]) - lp.mean(dim=-1))[keep]
    return hidden[len(prompt) - 1], hidden[-1], token_lp.tolist(), float(certainty.mean()) if keep.any() else 0.0


@torch.no_grad()
def test_signals_from_the_prompt_cache_equal_one_pass_per_response(tiny_llama_dir):  # noqa: F811
    model = scorer(str(tiny_llama_dir))
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, 1000, (37,), generator=g).tolist()
    responses = [torch.randint(0, 1000, (n,), generator=g).tolist() for n in (5, 19, 1, 12)]
    masks = [[1] * 5, [1] * 6 + [0] * 8 + [1] * 5, [1], [0] * 12]
    got = signals(model, prompt, responses + [[]], masks + [[]])
    assert got["lengths"] == [5, 19, 1, 12, 0]
    for j, (resp, mask) in enumerate(zip(responses, masks)):
        p_state, r_state, lps, cert = direct(model, prompt, resp, mask)
        torch.testing.assert_close(got["prompt_state"], p_state, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(got["response_states"][j], r_state, atol=1e-4, rtol=1e-4)
        assert got["token_logprobs"][j] == pytest.approx(lps, abs=1e-4)
        assert len(got["token_logprobs"][j]) == sum(mask)
        assert got["self_certainty"][j] == pytest.approx(cert, abs=1e-4)
    # the empty response: the prompt's own state, nothing scored
    torch.testing.assert_close(got["response_states"][4], got["prompt_state"])
    assert got["token_logprobs"][4] == [] and got["self_certainty"][4] == 0.0
    # the responses differ, so their states do (the cache was cut back, not reused as is)
    assert not torch.allclose(got["response_states"][0], got["response_states"][1])


class NoCache(torch.nn.Module):
    """A model that returns no keys and values, whatever it is asked."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, **kw):
        return self.model(**{**kw, "use_cache": False})


@torch.no_grad()
def test_a_model_that_keeps_no_cache_gives_the_same_signals(tiny_llama_dir):  # noqa: F811
    model = scorer(str(tiny_llama_dir))
    prompt, responses = list(range(5, 30)), [list(range(40, 49)), list(range(60, 63))]
    cached = signals(model, prompt, responses)
    whole = signals(NoCache(model), prompt, responses)
    torch.testing.assert_close(whole["response_states"], cached["response_states"], atol=1e-4, rtol=1e-4)
    for a, b in zip(whole["token_logprobs"], cached["token_logprobs"]):
        assert a == pytest.approx(b, abs=1e-4)


def test_grpos_training_policy_is_read_without_gradients_and_left_training(tiny_llama_dir):  # noqa: F811
    """GRPO's policy trains with activation checkpointing (which turns the cache off) and
    gradients on: signals reads it as in evaluation (the prompt encoded once, each response
    continuing from its cache), builds no autograd graph, and leaves it in training mode for
    the update that follows."""
    model = scorer(str(tiny_llama_dir))
    prompt, responses = list(range(5, 30)), [list(range(40, 49)), list(range(60, 63))]
    with torch.no_grad():
        expected = signals(model, prompt, responses)
    model.gradient_checkpointing_enable()
    model.train()
    read = []
    model.register_forward_pre_hook(lambda m, args, kw: read.append(kw["input_ids"].shape[1]), with_kwargs=True)
    got = signals(model, prompt, responses)
    assert model.training
    assert sum(read) == len(prompt) + sum(map(len, responses))  # the prompt once, not once per response
    assert not got["response_states"].requires_grad and not got["prompt_state"].requires_grad
    torch.testing.assert_close(got["response_states"], expected["response_states"], atol=1e-5, rtol=1e-5)
    for a, b in zip(got["token_logprobs"], expected["token_logprobs"]):
        assert a == pytest.approx(b, abs=1e-5)

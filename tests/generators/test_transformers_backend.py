"""The transformers backend on a tiny random-weight Llama with the embedded tokenizer.

    .venv/bin/python -m pytest tests/generators/test_transformers_backend.py -q

Checks seeds, logprobs against a plain teacher-forced forward pass, greedy decoding
against `model.generate`, stop strings, lengths, top-p, n samples and usage.
"""

from __future__ import annotations

import pytest
import torch

from generators.llm.base import Backend, ChatRequest
from generators.llm.transformers_backend import TransformersBackend

QUESTIONS = ["Hi", "What is the capital of France?", "Tell me a long story about a dragon and a knight, please.",
             "2+2?", "Name three colours.", "Why is the sky blue? Explain in detail to a child."]


def chat(q: str, **kw) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": q}], **kw)


@pytest.fixture(scope="module")
def backend(tiny_llama_dir):
    be = TransformersBackend(tiny_llama_dir, batch_size=4)
    yield be
    be.close()


def _teacher_forced(be: TransformersBackend, prompt: list[int], completion: list[int]) -> list[float]:
    """Plain forward pass over prompt+completion, no padding, no cache."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = be.lm(input_ids=ids).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return [logp[len(prompt) - 1 + k, t].item() for k, t in enumerate(completion)]


def test_implements_the_protocol(backend):
    assert isinstance(backend, Backend)
    assert backend.name == "transformers"
    assert backend.model.endswith(backend.path.name)


def test_same_seed_same_completions(backend):
    reqs = [chat(q, n=3, temperature=1.0, max_tokens=12, seed=7 + i) for i, q in enumerate(QUESTIONS)]
    a = backend.generate(reqs)
    b = backend.generate(reqs)
    assert [[c.token_ids for c in cs] for cs in a] == [[c.token_ids for c in cs] for cs in b]
    assert [[c.text for c in cs] for cs in a] == [[c.text for c in cs] for cs in b]
    # the n samples of one request differ, and another seed gives other samples
    assert len({tuple(c.token_ids) for c in a[2]}) > 1
    other = backend.generate([chat(QUESTIONS[2], n=3, temperature=1.0, max_tokens=12, seed=999)])
    assert [c.token_ids for c in other[0]] != [c.token_ids for c in a[2]]


def test_samples_do_not_depend_on_the_rest_of_the_batch(tiny_llama_dir, backend):
    """What holds whatever else shares the batch: greedy tokens, and the prompt a sample
    continues. (A seeded *sampled* token inverts the CDF of 49k near-equal probabilities of
    this random model, so float rounding of another batch shape may move it to a neighbour:
    seeded samples are exact for the same call, test_same_seed_same_completions.)"""
    target = chat(QUESTIONS[1], n=2, temperature=0.0, max_tokens=10, seed=3)
    alone = backend.generate([target])[0]
    crowd = backend.generate([chat(q, n=2, temperature=1.0, max_tokens=10, seed=50) for q in QUESTIONS] + [target])[-1]
    assert [c.token_ids for c in crowd] == [c.token_ids for c in alone]
    assert [c.prompt_tokens for c in crowd] == [c.prompt_tokens for c in alone]


def test_logprobs_equal_a_teacher_forced_forward_pass(backend):
    reqs = [chat(q, n=2, temperature=1.0, max_tokens=16, seed=i, logprobs=True) for i, q in enumerate(QUESTIONS)]
    out = backend.generate(reqs)
    checked = 0
    for req, comps in zip(reqs, out):
        prompt = backend.encode_chat(req.messages)
        for c in comps:
            assert len(c.logprobs) == len(c.token_ids) == c.completion_tokens > 0
            ref = _teacher_forced(backend, prompt, c.token_ids)
            assert max(abs(x - y) for x, y in zip(c.logprobs, ref)) < 1e-4
            assert max(abs(x - y) for x, y in zip(backend.score(prompt, c.token_ids), ref)) < 1e-4
            checked += 1
    assert checked == 2 * len(QUESTIONS)
    # batched score agrees with the single form
    prompts = [backend.encode_chat(r.messages) for r in reqs]
    batched = backend.score(prompts, [cs[0].token_ids for cs in out])
    for p, cs, lp in zip(prompts, out, batched):
        assert max(abs(x - y) for x, y in zip(lp, _teacher_forced(backend, p, cs[0].token_ids))) < 1e-4


def test_logprobs_only_when_asked(backend):
    c = backend.generate([chat("Hi", max_tokens=4, seed=1)])[0][0]
    assert c.logprobs is None and len(c.token_ids) == c.completion_tokens


def test_greedy_matches_hf_generate(backend):
    """Our batched left-padded loop picks the same tokens as model.generate, one prompt at a time."""
    out = backend.generate([chat(q, temperature=0.0, max_tokens=12) for q in QUESTIONS])
    for q, cs in zip(QUESTIONS, out):
        prompt = backend.encode_chat([{"role": "user", "content": q}])
        ids = torch.tensor([prompt])
        ref = backend.lm.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=12,
                                  do_sample=False, pad_token_id=backend.pad_id)[0, len(prompt):].tolist()
        n = len(cs[0].token_ids)
        assert cs[0].token_ids == ref[:n]
        if cs[0].finish_reason == "length":
            assert n == 12


def test_tiny_top_p_is_greedy(backend):
    greedy = backend.generate([chat(q, temperature=0.0, max_tokens=8) for q in QUESTIONS])
    nucleus = backend.generate([chat(q, temperature=1.5, top_p=1e-6, max_tokens=8, seed=i) for i, q in enumerate(QUESTIONS)])
    assert [cs[0].token_ids for cs in nucleus] == [cs[0].token_ids for cs in greedy]


def test_length_and_stop_strings(tiny_llama_dir):
    be = TransformersBackend(tiny_llama_dir, batch_size=4, ignore_eos=True)
    base = be.generate([chat(q, temperature=0.0, max_tokens=20) for q in QUESTIONS])
    for cs in base:
        assert cs[0].finish_reason == "length" and cs[0].completion_tokens == 20
    # pick a stop string from the middle of each greedy text; the rerun must end right before it
    reqs, expected = [], []
    for q, cs in zip(QUESTIONS, base):
        text = cs[0].text
        stop = text[len(text) // 2:len(text) // 2 + 3]
        if len(stop) < 3 or not stop.strip():
            continue
        reqs.append(chat(q, temperature=0.0, max_tokens=20, stop=["\x00never", stop]))
        expected.append((text[:text.find(stop)], cs[0].token_ids, stop))
    assert len(reqs) >= 3
    for (prefix, full_ids, stop), cs in zip(expected, be.generate(reqs)):
        c = cs[0]
        assert c.finish_reason == "stop"
        assert c.text == prefix
        # token ids: a prefix of the unstopped run that ends with the token completing the stop
        assert c.token_ids == full_ids[:len(c.token_ids)] and len(c.token_ids) < 20
        decode = lambda ids: be.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
        assert stop in decode(c.token_ids) and stop not in decode(c.token_ids[:-1])


def test_mixed_requests_keep_order_counts_and_usage(tiny_llama_dir):
    be = TransformersBackend(tiny_llama_dir, batch_size=3)
    # sampled and greedy requests mixed, with different n, lengths and seeds
    reqs = [chat(q, n=i % 3 + 1, temperature=0.0 if i % 2 else 0.8, max_tokens=5 + i, seed=i)
            for i, q in enumerate(QUESTIONS)]
    out = be.generate(reqs, progress=True)
    assert [len(cs) for cs in out] == [r.n for r in reqs]
    prompt_lens = [len(be.encode_chat(r.messages)) for r in reqs]
    for r, cs, pl in zip(reqs, out, prompt_lens):
        for c in cs:
            assert 1 <= c.completion_tokens <= r.max_tokens
            assert c.prompt_tokens == pl
            assert c.finish_reason in ("stop", "length")
            assert (c.finish_reason == "length") == (c.completion_tokens == r.max_tokens and c.token_ids[-1] not in be.eos_ids)
    # a greedy request alone gives the same tokens as inside the mixed call
    assert [c.token_ids for c in be.generate([reqs[5]])[0]] == [c.token_ids for c in out[5]]
    # the same mixed call again gives the same samples, sampled ones included
    again = be.generate(reqs)
    assert [[c.token_ids for c in cs] for cs in again] == [[c.token_ids for c in cs] for cs in out]
    u = be.usage
    assert u.requests == 2 * len(reqs) + 1
    assert u.prompt_tokens == 2 * sum(prompt_lens) + prompt_lens[5]
    assert u.completion_tokens == 2 * sum(c.completion_tokens for cs in out for c in cs) + \
        sum(c.completion_tokens for c in out[5])
    assert u.seconds > 0


def test_max_prompt_tokens_keeps_the_end(tiny_llama_dir):
    be = TransformersBackend(tiny_llama_dir, max_prompt_tokens=10)
    full = TransformersBackend(tiny_llama_dir)
    msgs = [{"role": "user", "content": QUESTIONS[5]}]
    assert be.encode_chat(msgs) == full.encode_chat(msgs)[-10:]
    assert be.generate([chat(QUESTIONS[5], max_tokens=3)])[0][0].prompt_tokens == 10


def test_hidden_states_match_a_plain_forward_pass(backend):
    prompts = [backend.encode_chat([{"role": "user", "content": q}]) for q in QUESTIONS[:3]]
    comps = [[100, 200, 300], [5], [42, 43]]
    last = backend.hidden_states(prompts, comps, pool="last")
    mean = backend.hidden_states(prompts, comps, pool="mean")
    assert last.shape == mean.shape == (3, backend.lm.config.hidden_size)
    for r, (p, c) in enumerate(zip(prompts, comps)):
        with torch.no_grad():
            h = backend.lm(input_ids=torch.tensor([p + c]), output_hidden_states=True).hidden_states[-1][0]
        assert torch.allclose(last[r], h[-1], atol=1e-4)
        assert torch.allclose(mean[r], h[len(p):].mean(0), atol=1e-4)


def test_bad_requests_raise(backend):
    with pytest.raises(ValueError):
        backend.generate([chat("x", n=0)])
    with pytest.raises(ValueError):
        TransformersBackend(backend.path, batch_size=0)


def test_registry_builds_backends_from_config(tiny_llama_dir):
    from dataclasses import fields

    from generators.llm.registry import BackendConfig, make_backend

    be = make_backend(BackendConfig(model=str(tiny_llama_dir), batch_size=5))
    assert isinstance(be, TransformersBackend) and be.batch_size == 5 and be.path == tiny_llama_dir
    assert all(f.metadata.get("help") for f in fields(BackendConfig))
    assert BackendConfig(model="a").config_hash() == BackendConfig(model="a", api_key="secret").config_hash()
    assert BackendConfig(model="a").config_hash() != BackendConfig(model="b").config_hash()
    with pytest.raises(ValueError, match="unknown backend"):
        make_backend(BackendConfig(backend="llamacpp"))
    with pytest.raises(ValueError, match="base_url"):
        make_backend(BackendConfig(backend="openai"))
    with pytest.raises(ValueError, match="cannot list models"):  # nothing listens on port 9
        make_backend(BackendConfig(backend="openai", base_url="http://127.0.0.1:9/v1", timeout=2))

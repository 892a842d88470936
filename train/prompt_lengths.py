"""Prompt lengths in a model's tokens, counted the way verl's RL dataset counts them, and whether
the model's chat template lists tools itself.

verl's RLHFDataset renders each prompt with the tokenizer's chat template (generation prompt
on, `tools=` the schemas of every tool in the tool config) and drops, or with filtering off
cuts from the left, every prompt longer than `data.max_prompt_length`. A template that renders
`tools` (Qwen's, Hermes-style) lists them itself; one that ignores them (SmolLM2's) needs the
tools in the system prompt.

An export counts 10^5-10^6 prompts whose system prompts list the offered tools, one JSON line a
tool: `Lengths` counts a prompt line by line and keeps the counts of the lines it saw (a tool's
line recurs in most prompts), so a prompt costs the tokens of its new lines (its question)
instead of all ~2,000. It cuts only at a lone line break between two non-space characters:
byte-level BPE (GPT-2's, SmolLM2's, Qwen's and Llama 3's pre-tokenizers) makes such a break a
token of its own, so the pieces' counts sum to the whole's (a run of breaks is one token alone
and two before text, so it is never cut); Lengths counts its first CHECK prompts both ways and
counts whole prompts from then on where the two ever differ (a tokenizer that merges across
lines).

    tok = load_tokenizer(None)                        # the embedded SmolLM2 tokenizer, or a folder
    renders_tools(tok)                                # False for SmolLM2
    summary([count(tok, p, tools) for p in prompts])  # rows, median, p95, max, max_prompt_length
    lengths = Lengths(tok, tools); summary([lengths(p) for p in prompts])   # the same, faster
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from pathlib import Path

STEP = 128  # max_prompt_length is suggested in multiples of this
CHECK = 32  # prompts Lengths counts both ways before it trusts its pieces
KEPT = 65_536  # line counts Lengths keeps (the least recently used go first)
_LINE = re.compile(r"(?<=\S\n)(?=\S)")  # a lone line break between two non-space characters
_PROBE = [{"type": "function", "function": {"name": "forgeplay_probe_tool", "description": "probe",
                                            "parameters": {"type": "object", "properties": {}}}}]


def load_tokenizer(path: str | Path | None):
    """The tokenizer of a model folder; None: the embedded model's (prepared, never downloaded)."""
    from transformers import AutoTokenizer

    if path is None:
        from generators.llm.model_store import ModelNotFoundError, embedded_model_path

        try:
            path = embedded_model_path(prepare=False)
        except ModelNotFoundError as e:
            raise ValueError(f"no tokenizer to measure prompts with: pass --tokenizer PATH ({e})") from None
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot load a tokenizer from {path}: {str(e).splitlines()[0]}") from None


def _render(tokenizer, messages: list[dict], tools: list[dict] | None) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True, tokenize=False)


def renders_tools(tokenizer) -> bool:
    """Whether the chat template writes the `tools=` schemas into the prompt."""
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    return "forgeplay_probe_tool" in _render(tokenizer, msgs, _PROBE)


def count(tokenizer, messages: list[dict], tools: list[dict] | None = None) -> int:
    """Tokens of `messages` rendered with the chat template (and `tools`), generation prompt included."""
    return len(tokenizer(_render(tokenizer, messages, tools), add_special_tokens=False)["input_ids"])


class Lengths:
    """`count(tokenizer, messages, tools)` for many prompts, line by line (module docstring)."""

    def __init__(self, tokenizer, tools: list[dict] | None = None, check: int = CHECK, kept: int = KEPT):
        self.tokenizer, self.tools, self.check, self.kept = tokenizer, tools, check, kept
        self.known: OrderedDict[str, int] | None = OrderedDict()  # None: counting whole prompts

    def __call__(self, messages: list[dict]) -> int:
        text = _render(self.tokenizer, messages, self.tools)
        if self.known is None:
            return self._tokens([text])[0]
        n = self._by_lines(text)
        if self.check > 0:
            self.check -= 1
            whole = self._tokens([text])[0]
            if whole != n:
                self.known = None
                return whole
        return n

    def _by_lines(self, text: str) -> int:
        known, counts, lines = self.known, {}, _LINE.split(text)
        for line in lines:
            if line in known:
                known.move_to_end(line)
                counts[line] = known[line]
            else:
                counts[line] = None
        new = [line for line, c in counts.items() if c is None]
        if new:
            for line, c in zip(new, self._tokens(new)):
                counts[line] = known[line] = c
            while len(known) > self.kept:
                known.popitem(last=False)
        return sum(counts[line] for line in lines)

    def _tokens(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]


def summary(lengths: list[int]) -> dict:
    """rows, min, median, p95, max, and max_prompt_length: the max rounded up to a multiple of STEP."""
    if not lengths:
        return {"rows": 0, "min": 0, "median": 0, "p95": 0, "max": 0, "max_prompt_length": STEP}
    s = sorted(lengths)
    pick = lambda q: s[min(len(s) - 1, math.ceil(q * len(s)) - 1)]  # noqa: E731  (nearest-rank percentile)
    return {"rows": len(s), "min": s[0], "median": pick(0.5), "p95": pick(0.95), "max": s[-1],
            "max_prompt_length": max(STEP, math.ceil(s[-1] / STEP) * STEP)}

"""Prompt lengths in a model's tokens, counted the way verl's RL dataset counts them, and whether
the model's chat template lists tools itself.

verl's RLHFDataset renders each prompt with the tokenizer's chat template (generation prompt
on, `tools=` the schemas of every tool in the tool config) and drops, or with filtering off
cuts from the left, every prompt longer than `data.max_prompt_length`. A template that renders
`tools` (Qwen's, Hermes-style) lists them itself; one that ignores them (SmolLM2's) needs the
tools in the system prompt.

    tok = load_tokenizer(None)                        # the embedded SmolLM2 tokenizer, or a folder
    renders_tools(tok)                                # False for SmolLM2
    summary([count(tok, p, tools) for p in prompts])  # rows, median, p95, max, max_prompt_length
"""

from __future__ import annotations

import math
from pathlib import Path

STEP = 128  # max_prompt_length is suggested in multiples of this
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


def summary(lengths: list[int]) -> dict:
    """rows, min, median, p95, max, and max_prompt_length: the max rounded up to a multiple of STEP."""
    if not lengths:
        return {"rows": 0, "min": 0, "median": 0, "p95": 0, "max": 0, "max_prompt_length": STEP}
    s = sorted(lengths)
    pick = lambda q: s[min(len(s) - 1, math.ceil(q * len(s)) - 1)]  # noqa: E731  (nearest-rank percentile)
    return {"rows": len(s), "min": s[0], "median": pick(0.5), "p95": pick(0.95), "max": s[-1],
            "max_prompt_length": max(STEP, math.ceil(s[-1] / STEP) * STEP)}

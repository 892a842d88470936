"""A stand-in for a model, for tests and benchmarks that exercise the code around the LLM
(synthesis, validation, export) without the cost of one: deterministic replies built from
the prompt, with every 7th reply broken (markup, off-topic, or naming a person and a year
the prompt never gave), so both the model path and the template fallbacks run. The corpus
question builder's prompts get the replies of generators/llm/scripted_chain.py, self-play's
examiner those of generators/llm/scripted_examiner.py. It has the backend shape (`generate(requests) -> completions`)
but writes no real reasoning: never use it to make data.

    from generators.llm.scripted import ScriptedBackend
    rows, stats = session.trajectories(plans, ScriptedBackend(), run_id)
"""

from __future__ import annotations

import re

from generators.llm.base import Completion, Declared
from generators.llm.scripted_chain import scripted_chain_text
from generators.llm.scripted_examiner import scripted_examiner_text


class ScriptedBackend(Declared):
    """Stands in for the LLM: an on-topic sentence naming the first quoted entity of the
    prompt, and every 7th reply markup, off-topic or invented text, so both the LLM path
    and the template fallbacks are exercised."""

    name, model = "scripted", "scripted"

    def __init__(self):
        self.calls = 0

    def generate(self, requests, progress=False):
        self.calls += 1
        return [[Completion(text=scripted_reply(r.messages, i)) for _ in range(r.n)] for i, r in enumerate(requests)]

    def close(self) -> None:
        """Nothing to release."""


def scripted_reply(messages: list[dict], i: int) -> str:
    """The scripted reply to a conversation as the `i`-th request of a batch: the examiner's
    next turn for self-play's examiner (generators/llm/scripted_examiner.py), the corpus
    question builder's replies (generators/llm/scripted_chain.py), else `scripted_text` of
    the last message."""
    return (scripted_examiner_text(messages) or scripted_chain_text(messages)
            or scripted_text(str(messages[-1].get("content") or ""), i))


def scripted_text(prompt: str, i: int) -> str:
    """The scripted reply to `prompt` as the `i`-th request of a batch (every 7th broken)."""
    quoted = re.findall(r'"([^"]+)"', prompt)
    answer = re.search(r"(?:answer is|The answer is) ([^.\n]+)", prompt)
    if i % 7 == 3:
        return "<tool_call>{}"
    if i % 7 == 5:
        return "The weather is nice today and I like it."
    if i % 7 == 1 and quoted:
        return f"I need the page about {quoted[0]}, which Quentin Zarvox described in 1920."
    if quoted:
        return f"I need the page about {quoted[0]} next, so I search for it."
    if answer:
        return f"So the answer is {answer.group(1)} as the pages show."
    return "I look this up with the matching search tool now."

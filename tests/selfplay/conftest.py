"""Fixtures for the self-play tests: a three-document corpus, its BM25 simulator, and a
builder of examiner conversations whose tool messages the simulator answers."""

import pytest

from generators.llm.toolcalls import format_tool_call, render_tools_block
from generators.tools.base import base_rows
from generators.tools.simulator import Simulator
from selfplay.examiner import examiner_messages

DOCS = [
    {"doc_id": "d1", "title": "Ada Quell", "text": "Ada Quell was a painter. She was born in Velmora."},
    {"doc_id": "d2", "title": "Velmora", "text": "Velmora is a town on the river Sand. Its mayor is Ben Orr."},
    {"doc_id": "d3", "title": "Sand", "text": "The Sand is a river that floods every spring."},
]
DOCUMENTS = {d["doc_id"]: (d["title"], d["text"]) for d in DOCS}
QUESTION = "Who is the mayor of the town where the painter Ada Quell was born?"
GOOD_FINAL = f"<think>Velmora's mayor is Ben Orr.</think>\n<question>{QUESTION}</question>\n<answer>Ben Orr</answer>"


def turn(think: str, queries: list[str], tool: str = "general_search") -> dict:
    """An examiner turn: a think block, then one search call per query."""
    calls = "\n".join(format_tool_call(tool, {"query": q}) for q in queries)
    return {"role": "assistant", "content": f"<think>{think}</think>\n{calls}"}


@pytest.fixture(scope="session")
def sim():
    return Simulator(DOCS, seed=1)


@pytest.fixture(scope="session")
def conversation(sim):
    """conversation(turns, final) -> the examiner's messages: prompt, each turn (think, queries)
    with the simulator's answers to its calls, and the final assistant text."""

    def build(turns: list[tuple[str, list[str]]], final: str, hops: int = 2) -> list[dict]:
        messages = examiner_messages(DOCS[0], hops, render_tools_block(base_rows(), style="compact"))
        for think, queries in turns:
            messages.append(turn(think, queries))
            for q in queries:
                messages.append({"role": "tool", "name": "general_search",
                                 "content": sim.call("general_search", {"query": q})})
        messages.append({"role": "assistant", "content": final})
        return messages

    return build


GOOD_TURNS = [("Ada was born in Velmora; who runs it?", ["Velmora"]), ("Find its mayor.", ["Velmora mayor"])]

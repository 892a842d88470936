"""Virtual tools for ToolForge-style synthesis: the tool bank (base tools + gated paraphrased
variants) and the deterministic BM25 tool simulator that answers their calls.

    from generators.tools import build_bank, render_tools_block, Simulator
    tools = build_bank(seed=7)
    sim = Simulator(documents, seed=7, tools=tools)
    sim.call("search_person", {"query": "Ada Lovelace"}, golden_doc_ids=["d1"], mode="good")
"""

from generators.llm.toolcalls import render_tools_block
from generators.tools.bank import BankBuild, build_bank, generate_bank
from generators.tools.base import BASE_TOOLS, DOMAINS, base_rows, to_openai

__all__ = ["BASE_TOOLS", "DOMAINS", "BankBuild", "base_rows", "build_bank", "generate_bank",
           "render_tools_block", "to_openai", "Simulator"]


def __getattr__(name: str):
    if name == "Simulator":  # lazy: the simulator pulls in bm25s/jsonschema only when used
        from generators.tools.simulator import Simulator
        return Simulator
    raise AttributeError(name)

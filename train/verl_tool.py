"""verl tool adapter: a `verl.tools.base_tool.BaseTool` that answers a forgeplay virtual tool's
calls with forgeplay's BM25 simulator (generators/tools/simulator.py) over an exported corpus.

It runs in verl's environment, not forgeplay's: `forgeplay export verl --tool-agent` copies it,
with the simulator, into the package `forgeplay_verl` of the export (train/verl_bundle.py), and
the export's tool config names it once per tool:

    - class_name: forgeplay_verl.train.verl_tool.SimulatorTool
      config: {type: native, corpus: corpus}      # a folder: documents.parquet + tools.jsonl
      # optional in config: retriever: http://host:port/retrieve (a retrieval server, e.g.
      # `forgeplay serve-retriever` over the same documents; default bm25 in the worker)
      tool_schema: {type: function, function: {name, description, parameters}}

A relative `corpus` is read from the top package's folder (forgeplay_verl/corpus). Per row,
verl's tool agent passes `extra_info.tools_kwargs[<tool name>].create_kwargs` to `create`:
{golden_doc_ids, seed}. A row's tools_kwargs names only the tools it offers, so a call to a
configured tool the row does not offer (where verl's loop does not filter by the row's
`tool_selection`) gets no create_kwargs, `{}`: `execute` then answers what the synthesized
conversations show for a tool that is not offered, '{"error": "unknown_tool", "detail": "no tool
named ..."}' (the simulator's `unknown_tool`), with the metric tool_error 1.0. Else `execute` returns
the simulator's text for
`Simulator(documents, seed, tools).call(<tool name>, arguments)`, a search by the call's own
arguments as forgeplay's own GRPO rollouts make it (train/rollout.py: the golden pages are not
handed out), a tool reward of 0.0 (the answer reward is the custom reward function), and
{"tool_error": 1.0 | 0.0, "found": 1.0 | 0.0} (found: the result holds one of the row's golden
pages). One simulator (one BM25 index) per corpus and seed per process.
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any
from uuid import uuid4

import pyarrow.parquet as pq
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse

from generators.tools import bm25_saved
from generators.tools.remote import RemoteRetriever
from generators.tools.simulator import Simulator, unknown_tool

RETRIEVERS = ("bm25", RemoteRetriever.__name__)  # (imported here so the export carries the server client)
BM25 = bm25_saved.__name__  # (imported here so the export carries it: the simulator's bm25 imports it when built)


@lru_cache(maxsize=8)
def simulator(corpus: str, seed: int, retriever: str = "bm25") -> Simulator:
    """The simulator over corpus/documents.parquet with the tool rows of corpus/tools.jsonl,
    searching with `retriever` (bm25, or a retrieval server's URL)."""
    folder = Path(corpus)
    docs = pq.read_table(folder / "documents.parquet").to_pylist()
    tools = [json.loads(line) for line in (folder / "tools.jsonl").read_text().splitlines() if line.strip()]
    return Simulator(docs, seed=seed, tools=tools, retriever=retriever)


def corpus_folder(value: str) -> str:
    """An absolute corpus path as it is; a relative one inside this module's top package."""
    path = Path(value)
    if not path.is_absolute():
        top = sys.modules[__name__.split(".")[0]]
        path = Path(list(top.__path__)[0]) / path
    if not (path / "documents.parquet").is_file():
        raise FileNotFoundError(f"no documents.parquet in the tool corpus folder {path}")
    return str(path)


class SimulatorTool(BaseTool):
    """One forgeplay virtual tool (its name is the tool schema's) answered by the simulator."""

    def __init__(self, config: dict, tool_schema):
        super().__init__(config, tool_schema)
        self.corpus = corpus_folder(str(config.get("corpus") or "corpus"))
        self.retriever = str(config.get("retriever") or "bm25")
        self._instances: dict[str, dict] = {}

    async def create(self, instance_id: str | None = None, create_kwargs: dict | None = None,
                     **kwargs) -> tuple[str, ToolResponse]:
        instance_id = instance_id or uuid4().hex
        ck = create_kwargs or {}
        self._instances[instance_id] = {"golden_doc_ids": [str(g) for g in (ck.get("golden_doc_ids") or [])],
                                        "seed": int(ck.get("seed") or 0), "offered": "golden_doc_ids" in ck}
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        state = self._instances.get(instance_id) or {"golden_doc_ids": [], "seed": 0, "offered": False}
        if not state["offered"]:  # the row does not offer this tool (module docstring)
            return ToolResponse(text=unknown_tool(self.name)), 0.0, {"tool_error": 1.0, "found": 0.0}
        sim = simulator(self.corpus, state["seed"], self.retriever)
        golden = [g for g in state["golden_doc_ids"] if g in sim.index_of]
        text = sim.call(self.name, parameters)  # by its query alone (module docstring)
        return ToolResponse(text=text), 0.0, {"tool_error": float(text.startswith('{"error"')),
                                              "found": float(any(g in text for g in golden))}

    async def release(self, instance_id: str, **kwargs) -> None:
        self._instances.pop(instance_id, None)

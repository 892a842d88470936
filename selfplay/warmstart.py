"""Examiner warm-start: demonstrations of how to build a task, made by the program from the
world's triples, because a 135M base model can neither search nor pose a question yet.

A triple's golden documents are its chain of hops, in order, and its supporting facts say
what each hop's page gives. Its demonstration is the examiner conversation that would have
built it: the prompt (`selfplay.examiner.examiner_messages`) with the first hop's page as
the start document, then one turn per hop that states the fact just read (the supporting
sentence) and searches the next page by its title, answered by the real BM25 simulator
with no golden ids (exactly as the examiner's searches are answered in self-play), then a
last turn that states the final fact and writes the triple's question and answer.

Every demonstration goes through `parse_examiner` with the documents, the same parser and
task rules the examiner's own outputs meet; the ones it rejects are left out and counted
by reason (comparison questions name their answer, arithmetic answers are in no page, a
title search may miss its page). So each kept demonstration is a task the filter accepts.

    demos, skipped = demonstrations(documents, triples, simulator, tool, hop_mix="4:3:2:1", n=200)
    demos[0]["trajectory"]  # a `trajectories` row (route "examiner", case "warmstart") for SFT
    demos[0]["task"]        # its `tasks` row with the QCP

`forgeplay selfplay warmstart` (flows/cli_selfplay.py) writes both kinds to a dataset and
fine-tunes the examiner on the trajectories with the SFT stage.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from dataclasses import dataclass, field

from generators.llm.toolcalls import format_tool_call, render_tools_block
from generators.tools.base import parameters_of
from generators.tools.retriever import option as retriever_option
from selfplay.examiner import examiner_messages, parse_examiner
from validators.verdict import Reject

ROUTE, CASE = "examiner", "warmstart"
EXAMINER_TOOL = "general_search"  # the base tool that sees every document


@dataclass
class WarmstartConfig:
    """What `forgeplay selfplay warmstart` builds and trains (every field is a CLI option)."""

    dataset: str = field(default="", metadata={"required": True, "help": "world dataset with documents and triples"})
    demos: str = field(default="", metadata={"flag": "out-dataset", "aliases": ("demos",), "help": "dataset that receives the demonstrations (trajectories and tasks; default: <dataset>_examiner, or <dataset>_examiner_topK with --top-k K)"})
    n: int = field(default=0, metadata={"help": "demonstrations at most (0 = every triple that makes one)"})
    hop_mix: str = field(default="4:3:2:1", metadata={"help": "weights of target hop counts 1:2:3:..., over the hop counts the triples have"})
    draw_seed: int = field(default=0, metadata={"help": "seed of which triples become demonstrations"})
    model: str | None = field(default=None, metadata={"help": "examiner to fine-tune: model folder or prepared name (default: embedded)"})
    out: str = field(default="", metadata={"help": "run folder of the examiner's fine-tuning (empty: only write the demonstrations)"})
    train_layers: int = field(default=0, metadata={"help": "fine-tune only the last N transformer blocks (0 = all; about 2x faster on CPU)"})
    retriever: str = retriever_option()
    top_k: int = field(default=0, metadata={"help": "results each demonstration's searches ask for (their top_k argument; 0 = the tool's default, 5): fewer make shorter demonstrations, cheaper to train on"})

    def demos_dataset(self) -> str:
        if not self.dataset:
            raise ValueError("--dataset is required (a world dataset: forgeplay corpus world --dataset NAME)")
        return self.demos or f"{self.dataset}_examiner" + (f"_top{self.top_k}" if self.top_k else "")  # SFT reads it all


def examiner_tool(tools: list[dict]) -> dict:
    """The tool the examiner searches with, from a list of tool rows."""
    return next(t for t in tools if t["name"] == EXAMINER_TOOL)


def row_messages(messages: list[dict]) -> list[dict]:
    """Messages in the stored shape (storage/schemas/_common.json): tool calls stay in the
    text, so `tool_calls` and `tool_call_id` are empty."""
    return [{"role": m["role"], "content": m.get("content") or "", "tool_calls": None, "tool_call_id": None,
             "name": m.get("name")} for m in messages]


def parse_hop_mix(text: str) -> dict[int, float]:
    """"4:3:2:1" -> {1: 0.4, 2: 0.3, 3: 0.2, 4: 0.1}: weights of target hop counts 1, 2, ..."""
    try:
        weights = [float(x) for x in text.split(":")]
    except ValueError:
        raise ValueError(f"--hop-mix is weights of 1, 2, ... hops separated by ':', e.g. 4:3:2:1; got {text!r}") from None
    if not weights or any(w < 0 for w in weights) or not sum(weights):
        raise ValueError(f"--hop-mix needs non-negative weights with a positive sum, got {text!r}")
    return {h: w / sum(weights) for h, w in enumerate(weights, 1) if w}


@dataclass(frozen=True)
class Hop:
    """One page of a triple's chain: its doc id, title and the supporting sentence it gives."""

    doc_id: str
    title: str
    fact: str


def chain(triple: dict, documents: dict[str, dict]) -> list[Hop]:
    """The triple's golden pages in order, each with its first supporting sentence."""
    facts: dict[str, str] = {}
    for f in triple.get("supporting_facts") or []:
        facts.setdefault(f["doc_id"], f["sentence"])
    return [Hop(d, documents[d]["title"], facts.get(d, "")) for d in triple["golden_doc_ids"] if d in documents]


def _think(text: str) -> str:
    return f"<think>{text}</think>"


def conversation(triple: dict, documents: dict[str, dict], simulator, tool: dict, top_k: int = 0) -> list[dict]:
    """The examiner conversation that builds `triple` (module docstring): the start page,
    a search for every hop's page (asking for `top_k` results when set), then the question
    and the answer."""
    hops = chain(triple, documents)
    start = documents[hops[0].doc_id]
    msgs = examiner_messages(start, len(hops), render_tools_block([tool]))
    before = f"The start document is about {hops[0].title}."
    for hop in hops:
        args = {"query": hop.title, **({"top_k": top_k} if top_k else {})}
        msgs.append({"role": "assistant", "content": f"{_think(f'{before} Next I search for {hop.title}.')}\n"
                                                     f"{format_tool_call(tool['name'], args)}"})
        msgs.append({"role": "tool", "name": tool["name"], "content": simulator.call(tool["name"], args)})
        before = f"The page about {hop.title} says: {hop.fact}" if hop.fact else f"I found the page about {hop.title}."
    final = f"{before} These {len(hops)} pages make a {len(hops)}-hop question; its answer is {triple['answer']}."
    msgs.append({"role": "assistant", "content": f"{_think(final)}\n<question>{triple['question']}</question>\n"
                                                 f"<answer>{triple['answer']}</answer>"})
    return msgs


def task_id(triple_id: str, top_k: int = 0) -> str:
    """A demonstration's id: its triple's, and the results its searches ask for when set
    (another conversation, so another row)."""
    key = f"examiner-warmstart|{triple_id}" + (f"|top_k={top_k}" if top_k else "")
    return "warm-" + hashlib.sha256(key.encode()).hexdigest()[:20]


def _trajectory(triple: dict, msgs: list[dict], tool: dict, tid: str) -> dict:
    return {"id": tid, "traj_id": tid, "triple_id": triple["triple_id"], "question": triple["question"],
            "route": ROUTE, "case": CASE, "messages": row_messages(msgs),
            "tools": [{"tool_id": tool["tool_id"], "name": tool["name"], "description": tool["description"],
                       "parameters": json.dumps(parameters_of(tool), ensure_ascii=False)}],
            "correct_tools": [tool["name"]], "answer": triple["answer"],
            "meta": json.dumps({"role": "examiner", "hop_count": triple["hop_count"], "task_id": tid}, sort_keys=True)}


def demonstrations(documents: list[dict], triples: list[dict], simulator, tool: dict, *, hop_mix: str = "4:3:2:1",
                   n: int = 0, seed: int = 0, dataset: str | None = None, top_k: int = 0) -> tuple[list[dict], Counter]:
    """Up to `n` (0: all) demonstrations, drawn so that their hop counts follow `hop_mix`
    over the hop counts the triples have; each a {"trajectory", "task"} pair; their searches
    ask for `top_k` results (0: the tool's default). Also what was left out: triples by the
    parser's reason code, and hop counts with no or too few triples."""
    if top_k < 0:
        raise ValueError(f"--top-k must be 0 (the tool's default) or more, not {top_k}")
    docs = {d["doc_id"]: d for d in documents}
    texts = {d: (doc["title"], doc["text"]) for d, doc in docs.items()}
    mix = parse_hop_mix(hop_mix)
    by_hops: dict[int, list[dict]] = {}
    for t in sorted(triples, key=lambda t: t["triple_id"]):
        if t.get("hop_count") in mix and all(g in docs for g in t["golden_doc_ids"]):
            by_hops.setdefault(t["hop_count"], []).append(t)
    rng = random.Random(seed)
    for group in by_hops.values():
        rng.shuffle(group)
    out, skipped = [], Counter({f"no_{h}_hop_triples": 1 for h in mix if h not in by_hops})
    present = {h: w for h, w in mix.items() if h in by_hops}  # the mix over the hop counts there are
    if n:
        quota = {h: max(1, round(n * w / sum(present.values()))) for h, w in present.items()}
    else:  # every triple that makes one
        quota = {h: len(by_hops[h]) for h in present}
    for h in sorted(by_hops):
        kept = 0
        for t in by_hops[h]:
            if kept >= quota.get(h, 0):
                break
            msgs = conversation(t, docs, simulator, tool, top_k)
            tid = task_id(t["triple_id"], top_k)
            try:
                task = parse_examiner(msgs, h, tid, dataset, seed_doc_id=t["golden_doc_ids"][0],
                                      aliases=t.get("aliases") or (), documents=texts)
            except Reject as r:
                skipped[r.reason] += 1
                continue
            out.append({"trajectory": _trajectory(t, msgs, tool, tid), "task": {**task, "id": tid}})
            kept += 1
        if n and kept < quota.get(h, 0):
            skipped[f"short_of_{h}_hop_quota"] += quota[h] - kept
    return out, skipped

"""The corpus the rule checks read (a dataset's documents and tool bank), loaded once per
process: the flow's per-record tasks may run in worker processes, which get only plain
inputs (data root, dataset, fingerprint) and build their RuleContext here on first use.

    fp = corpus_fingerprint(root, "demo")          # changes when documents/tools change
    ctx = rule_context(root, "demo", fp, answer_min_f1=1.0, replay=True, final_facts=True)
"""

from __future__ import annotations

import hashlib

from storage import load_table
from storage.reader import entries
from validators.rule_context import RuleContext

_CACHE: dict[tuple, RuleContext] = {}


def corpus_fingerprint(root: str, dataset: str | None) -> str:
    """A hash of the committed documents and tools shards of `dataset` ("" for none)."""
    if not dataset:
        return ""
    shas = sorted(f"{e.kind}:{e.sha256}" for e in entries(root, dataset) if e.kind in ("documents", "tools"))
    return hashlib.sha256("|".join(shas).encode()).hexdigest()[:16]


def load_corpus(root: str, dataset: str | None, retriever: str = "bm25"):
    """(documents {doc_id: (title, text)}, simulator factory seed -> Simulator or None); the
    simulators of all seeds search with one `retriever` (generators/tools/retriever.py)."""
    if not dataset:
        return {}, None
    docs = load_table(dataset, "documents", root).to_pylist()
    tools = load_table(dataset, "tools", root).to_pylist()
    documents = {d["doc_id"]: (d.get("title") or "", d.get("text") or "") for d in docs}
    if not docs or not tools:
        return documents, None
    from generators.tools.retriever import index_dir
    from generators.tools.simulator import Simulator

    sims: dict[int, Simulator] = {}

    def simulator(seed: int) -> Simulator:  # one simulator per seed, built on first use
        if seed not in sims:
            shared = next(iter(sims.values())).index if sims and retriever != "bm25" else retriever
            sims[seed] = Simulator(docs, seed=seed, tools=tools, retriever=shared, index_dir=index_dir(root))
        return sims[seed]

    return documents, simulator


def rule_context(root: str, dataset: str | None, fingerprint: str, answer_min_f1: float = 1.0,
                 replay: bool = True, final_facts: bool = True, retriever: str = "bm25") -> RuleContext:
    """The RuleContext of (root, dataset), cached in this process by fingerprint and options.
    With no dataset (a user's --input file) or no documents committed, documents are None
    (unknown: the rules that need them pass with a "documents_unknown" reason)."""
    key = (str(root), dataset, fingerprint, answer_min_f1, replay, final_facts, retriever)
    ctx = _CACHE.get(key)
    if ctx is None:
        documents, sim_for = load_corpus(root, dataset, retriever)
        if len(_CACHE) >= 4:
            _CACHE.clear()
        ctx = _CACHE[key] = RuleContext(sim_for, answer_min_f1, replay, documents or None, final_facts=final_facts)
    return ctx

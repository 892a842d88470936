"""ToolForge-style synthesis, end to end as plain functions (the Prefect flow in
flows/synthesize.py only orchestrates them):

    inputs  = load_inputs(root, dataset)                  # documents + triples shards
    session = Session(inputs, cfg)                        # tool bank, simulator, skeleton builder
    plans   = session.plans()                             # route from structure, case from the mix
    rows, stats = session.trajectories(plans[:64], backend, run_id)
    todo    = pending(plans, run_id, committed_traj_ids)  # a rerun skips what is committed

The program builds every call and result; the backend writes only the reasoning and the
answer wording, all slots of a chunk in one batched `generate` call.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Iterator

from generators.corpus.questions import question_ask, question_kind
from generators.llm.base import ChatRequest
from generators.synth import plan as planning
from generators.synth.assemble import to_row, traj_id_for
from generators.synth.skeleton import Skeleton, SkeletonBuilder
from generators.synth.synth_config import SynthConfig
from generators.synth.think import clean_think, lead, slot_prompt, template


@dataclass
class Inputs:
    documents: list[dict]
    triples: list[dict]


def load_inputs(root, dataset: str) -> Inputs:
    """The dataset's documents (id, title, text, meta) and triples (their id and content, not
    the run, time and lineage each row carries: reading those into Python took half of the 0.5 s
    that 25,000 triples took)."""
    from storage import load_table
    from storage.schema import load

    docs = load_table(dataset, "documents", root, columns=["doc_id", "title", "text", "meta"]).to_pylist()
    triples = load_table(dataset, "triples", root, columns=["id", *load("triples").content_fields]).to_pylist()
    if not docs or not triples:
        raise ValueError(f"dataset {dataset!r} needs documents and triples; build them with "
                         f"`forgeplay corpus world --dataset {dataset}` or `forgeplay corpus import FILE --dataset {dataset}`")
    return Inputs(docs, triples)


class Session:
    """Everything a synthesis run needs in memory, built once per process."""

    def __init__(self, inputs: Inputs, cfg: SynthConfig, tools: list[dict] | None = None, index_dir=None):
        from generators.tools.simulator import domain_for

        self.cfg = cfg
        self.index_dir = index_dir  # where a dense index's vectors are kept (generators/tools/retriever.py)
        self.docs = {d["doc_id"]: d for d in inputs.documents}
        self.triples = {t["triple_id"]: t for t in inputs.triples}
        self._documents = inputs.documents
        self.case_mix = planning.parse_mix(cfg.case_mix, planning.CASES)
        self.route_mix = planning.parse_mix(cfg.route_mix, planning.ROUTES)
        self.rejected: Counter = Counter()
        self._fact_cache: dict = {}  # facts per document, shared by planning and evidence
        self.held_out = cfg.held_out(self.triples)
        self._pool: list[planning.Plan] | None = None
        self._domains = {d: domain_for(doc.get("meta")) for d, doc in self.docs.items()}
        self.tools: list[dict] = []
        self._corpus, self._bank_domains = False, set()  # a corpus bank; the domains of the bank's tools
        self._sim = self._builder = None
        self.computes = cfg.calculator  # plans end with a calculator call (the bank will have one)
        if tools is not None:
            self.set_tools(tools)

    def set_tools(self, tools: list[dict]) -> None:
        """The tool bank the trajectories offer. Plans do not depend on it, but for whether it
        has the calculator: a run can be planned, and its size checked, before the bank is built."""
        from generators.tools.compute import is_compute

        from generators.tools.base import DOMAINS
        from generators.tools.corpus_bank import is_corpus_tool

        self.tools = tools
        self._sim = self._builder = None
        computes = self.cfg.calculator and any(is_compute(t) for t in tools)
        self._corpus = any(is_corpus_tool(t) for t in tools)
        self._bank_domains = {t["domain"] for t in tools}
        if computes != self.computes or self._corpus or not set(DOMAINS) <= self._bank_domains:
            self._pool = None  # the plans' lookups go to the domains this bank has
        self.computes = computes

    def domain_of(self, doc_id: str) -> str:
        """The domain tool meant for a document: with a corpus bank its kind's tool's
        (Simulator.domain_of), else generators.tools.simulator.domain_for; the general search
        when the bank has no tool of that domain."""
        from generators.tools.base import GENERAL

        d = self.sim.domain_of(doc_id) if self._corpus else self._domains[doc_id]
        return d if not self.tools or d in self._bank_domains else GENERAL

    def _wrong_possible(self, plan) -> bool:
        """Whether the bank has a domain tool besides the plan's own (wrong_tool, escalation)."""
        from generators.tools.base import GENERAL
        from generators.tools.compute import COMPUTE

        planned = {h.domain for r in plan.lookups for h in r}
        return not self.tools or any(d not in planned and d not in (GENERAL, COMPUTE) for d in self._bank_domains)

    @property
    def sim(self):
        """The tool simulator over the documents (its BM25 index is built on first use)."""
        if self._sim is None:
            from generators.tools.simulator import Simulator

            self._sim = Simulator(self._documents, seed=self.cfg.seed, tools=self.tools, retriever=self.cfg.retriever,
                                  index_dir=self.index_dir)
        return self._sim

    @property
    def builder(self) -> SkeletonBuilder:
        if self._builder is None:
            cfg = self.cfg
            self._builder = SkeletonBuilder(self.sim, self.tools, seed=cfg.seed,
                                            distractors=(cfg.distractors_min, cfg.distractors_max),
                                            top_k_rate=cfg.top_k_rate, top_k_choices=cfg.top_k_choices())
        return self._builder

    def _docs_of(self, triple: dict) -> dict[str, tuple[str, str]]:
        """(title, text) of the triple's golden documents, by doc_id."""
        return {d: (self.docs[d]["title"], self.docs[d]["text"]) for d in triple["golden_doc_ids"] if d in self.docs}

    def _rounds(self, triple: dict, fact_cache: dict):
        from generators.corpus.derive import FactBase

        meta = json.loads(triple.get("meta") or "{}")
        if isinstance(meta, dict) and "program" in meta:
            golden = [(self.docs[d]["title"], self.docs[d]["text"]) for d in triple["golden_doc_ids"] if d in self.docs]
            facts = FactBase.from_docs(golden, cache=fact_cache)
            return planning.program_rounds(triple, meta["program"], self.docs, self.domain_of, facts)
        return planning.structural_rounds(triple, self.docs, self.domain_of)

    def _usable(self) -> list[planning.Plan]:
        """One plan per usable triple that is not held out (route from structure, case from
        the mix), sorted by triple id; triples that cannot be planned are counted in
        `rejected` by reason. Built once, and again after a bank that moves the lookups
        (`set_tools`), whose count of rejects replaces the first's."""
        if self._pool is not None:
            return self._pool
        from generators.synth.evidence import evidence_for

        out, cache = [], self._fact_cache
        self.rejected = Counter()
        for tid in sorted(set(self.triples) - self.held_out):
            triple = self.triples[tid]
            if any(d not in self.docs for d in triple["golden_doc_ids"]):
                self.rejected["golden_doc_missing"] += 1
                continue
            try:
                rounds = self._rounds(triple, cache)
            except Exception as e:  # a triple whose program does not run on its documents
                self.rejected[f"unplannable:{type(e).__name__}"] += 1
                continue
            if not rounds:
                self.rejected["no_lookup"] += 1
                continue
            if self.computes:
                expression = evidence_for(triple, self._docs_of(triple), cache).expression
                rounds = rounds + [[planning.compute_hop(expression)]] if expression else rounds
            p = planning.Plan(tid, rounds, planning.route_of(rounds))
            p.allowed = planning.allowed_cases(p)
            if not self._wrong_possible(p):
                p.allowed = [c for c in p.allowed if c not in ("wrong_tool", "escalation")]
            p.case = planning.choose_case(p, self.case_mix, self.cfg.seed)
            out.append(p)
        self._pool = out
        return out

    def _select(self, n: int) -> list[planning.Plan]:
        return planning.select_by_route(self._usable(), n, self.route_mix, self.cfg.seed, self.cfg.rounds_weight,
                                        kind=self.kind if self.cfg.kinds_in_turn else None,
                                        ask=self.ask if self.cfg.asks_in_turn else None)

    def triples_in_use(self) -> int:
        """Triples a run can draw on: usable ones whose route has a weight in the route mix."""
        return sum(1 for p in self._usable() if self.route_mix.get(p.route, 0.0) > 0)

    def capacity(self) -> int:
        """How many trajectories this config can make: `per_triple` for each triple in use."""
        return self.triples_in_use() * self.cfg.per_triple

    def shortfall(self) -> str | None:
        """Why `n` trajectories cannot be made, or None when they can (or `allow_fewer`)."""
        can = self.capacity()
        if self.cfg.n <= can or self.cfg.allow_fewer:
            return None
        unused = len(self._usable()) - self.triples_in_use()
        return (f"asked for {self.cfg.n} trajectories, but dataset {self.cfg.dataset!r} allows {can}: "
                f"{self.triples_in_use()} triples in use x --per-triple {self.cfg.per_triple} "
                f"(held out: {len(self.held_out)}; unplannable: {sum(self.rejected.values())}"
                f"{f' {dict(self.rejected)}' if self.rejected else ''}; on routes with no weight in --route-mix: "
                f"{unused}). Raise --per-triple, add triples, or pass --allow-fewer to make {can}")

    def picks(self) -> Iterator[planning.Plan]:
        """The plans of the run, in order, made as they are asked for: up to `n` triples'
        plans picked by route (`select_by_route`); past the triples in use, their variants
        (planning.variant_of) in the same order, variant 1 of each, then 2, ... up to
        `per_triple`. Nothing here grows with `n` but the triples' own plans."""
        n, in_use = min(self.cfg.n, self.capacity()), self.triples_in_use()
        if n <= in_use:
            yield from self._select(n)
            return
        base = self._select(in_use)
        picked = {p.triple_id for p in base}
        base += [p for p in self._usable() if p.triple_id not in picked and self.route_mix.get(p.route, 0.0) > 0]
        yield from base
        made = len(base)
        for v in range(1, self.cfg.per_triple):
            for p in base:
                if made >= n:
                    return
                yield planning.variant_of(p, v, self.case_mix, self.cfg.seed)
                made += 1

    def plans(self) -> list[planning.Plan]:
        """Every plan of the run (`picks`), as a list."""
        return list(self.picks())

    def kind(self, p: planning.Plan) -> str:
        """A plan's kind of question: its triple's type and hop count ("compositional/2")."""
        return question_kind(self.triples[p.triple_id])

    def ask(self, p: planning.Plan) -> str:
        """What a plan's question asks of its last page ("population")."""
        return question_ask(self.triples[p.triple_id])

    def skeletons(self, plans: list[planning.Plan]) -> list[Skeleton]:
        from generators.synth.evidence import evidence_for

        out = []
        for p in plans:
            triple = self.triples[p.triple_id]
            out.append(self.builder.build(p, triple, evidence_for(triple, self._docs_of(triple), self._fact_cache),
                                          every_step=self.cfg.reasoning == "evidence", phrased=self.cfg.reasoning == "plan",
                                          first_general=self.cfg.first_search == "general",
                                          states_facts=self.cfg.reasoning == "facts"))
        return out

    def prepare(self, plans: list[planning.Plan]) -> "Prepared":
        """A chunk's skeletons and the requests for its model-written texts (one per slot; none
        when the program writes every text, --texts template)."""
        t0 = time.perf_counter()
        sks = self.skeletons(plans)
        slots = []  # (skeleton index, slot)
        for i, sk in enumerate(sks):
            slots += [(i, t.slot) for t in sk.turns] + [(i, sk.final), (i, sk.answer)]
        requests = [] if self.cfg.texts == "template" else [
            ChatRequest(messages=slot_prompt(sks[i].triple["question"], s), n=1, temperature=self.cfg.temperature,
                        max_tokens=self.cfg.max_final_tokens if s.kind == "final" else self.cfg.max_think_tokens,
                        seed=self.cfg.seed + k, stop=["\n\n"]) for k, (i, s) in enumerate(slots)]
        return Prepared(sks, slots, requests, time.perf_counter() - t0)

    def finish(self, prep: "Prepared", outs, run_key: str, llm_s: float = 0.0) -> tuple[list[dict], dict]:
        """Rows for a prepared chunk from the model's answers (`outs`, one list per request;
        None: the program writes every text) and timing/source stats."""
        t2 = time.perf_counter()
        sks, slots = prep.skeletons, prep.slots
        if outs is None:  # texts="template": the program writes every text
            picked = [(template(slot), "template:mode") for _, slot in slots]
        else:
            picked = [clean_think(out[0].text if out else "", slot) for (_, slot), out in zip(slots, outs)]
        texts: dict[int, list[tuple[str, str]]] = {i: [] for i in range(len(sks))}
        by_slot: dict[str, Counter] = {}
        for (i, slot), (text, source) in zip(slots, picked):
            texts[i].append((lead(slot, text, self.cfg.lead == "every"), source))
            by_slot.setdefault(slot.kind, Counter())[source] += 1
        rows = []
        for i, sk in enumerate(sks):
            parts = texts[i]
            thinks = [t for t, _ in parts[:-2]]
            (final, _), (answer, _) = parts[-2], parts[-1]
            rows.append(to_row(sk, thinks, final, answer, [s for _, s in parts], run_key, self.cfg.tool_style,
                               None if self.cfg.retriever == "bm25" else self.sim.retriever))
        t3 = time.perf_counter()
        stats = {"program_s": prep.program_s + (t3 - t2), "llm_s": llm_s, "slots": len(slots),
                 "sources": Counter(s.split(":")[0] for i in texts for _, s in texts[i]),
                 "fallbacks": Counter(s for i in texts for _, s in texts[i] if s != "llm"), "by_slot": by_slot}
        return rows, stats

    def trajectories(self, plans: list[planning.Plan], backend, run_key: str) -> tuple[list[dict], dict]:
        """Rows for `plans` and timing/source stats. One batched generate call for all slots."""
        prep = self.prepare(plans)
        t1 = time.perf_counter()
        if backend is None or self.cfg.texts == "template":
            return self.finish(prep, None, run_key)
        outs = backend.generate(prep.requests) if prep.requests else []
        return self.finish(prep, outs, run_key, time.perf_counter() - t1)


@dataclass
class Prepared:
    """A chunk ready for the model: its skeletons, their text slots and one request per slot."""

    skeletons: list[Skeleton]
    slots: list[tuple[int, object]]
    requests: list[ChatRequest]
    program_s: float = 0.0


def pending(plans: list[planning.Plan], run_id: str, committed_traj_ids) -> list[planning.Plan]:
    """The plans whose trajectory is not committed yet in run `run_id` (what a rerun resumes)."""
    done = set(committed_traj_ids)
    return [p for p in plans if traj_id_for(run_id, p.triple_id, p.case, p.variant) not in done]

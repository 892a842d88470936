"""Deterministic tool simulator: answers virtual tool calls from the corpus documents.

One retriever over all documents (passage = title + text; one passage per document, so a
golden doc id maps to exactly one result): bm25s's BM25 by default, or `retriever="dense"`,
`"hybrid"` or a retrieval server's URL (generators/tools/retriever.py); a domain tool only sees documents of its entity
types (documents.meta["entity_type"]) plus documents with no known type; the general search
sees everything. The tool message is built by the program, not by a model:

    sim = Simulator(documents, seed=7, tools=build_bank(7))
    sim.call("search_person", {"query": "Ada Lovelace birthplace"},
             golden_doc_ids=["d1"], mode="good", supporting=["She was born in London."])
    -> '{"results": [{"doc_id": ..., "title": ..., "snippet": ...}, ...]}'

Modes: "good" = every golden passage the tool can see (with its supporting sentences), mixed
with BM25 distractors; "bad" = hard negatives only (top BM25 hits that are not golden, then
documents of the golden docs' entity type); "insufficient" = related results that lack the
needed fact: golden passages with the supporting sentences (and any sentence naming an
answer) removed, plus one-sentence snippets of non-golden hits. In "bad" and "insufficient"
mode no snippet keeps a supporting sentence or an answer, even from a non-golden document,
and no result is titled with an answer (so these modes may return fewer than k results). Results are shuffled with a
RNG seeded from (seed, tool, canonical arguments, mode, golden ids, supporting, answers, k),
so the same call always gives byte-identical output. Arguments are checked against the
tool's JSON Schema: {"error": "invalid_arguments", "detail": ...}; unknown tool:
{"error": "unknown_tool", ...} (`unknown_tool(name)`). `search(query, k, domain)` is plain
BM25 for other callers.
The calculator (generators/tools/compute.py) is known to every simulator and answered there.
A corpus bank's tool (generators/tools/corpus_bank.py) sees the documents of its kind or
cluster and those of none (`corpus_domains`).
The BM25 query of a call is its lookup argument plus, for a base tool or variant, every other
scalar argument but top_k and language; an imported tool (generators.tools.imported) searches
its domain like that domain's base tool, with its lookup and its name arguments only.

Many calls at once: `sim.calls([SimCall(...), ...])` (or `answers`, which returns a call's error
instead of raising it) gives for each exactly what `call` gives, with the searches of the batch
asked of the index together (generators/tools/retrieval.py: bm25s's scores, read over the
documents a query can score) and a call asked twice answered once; validation replays a whole
chunk's calls this way. `SimCall` and the error answers live in generators/tools/sim_call.py.
Benchmark: `python benchmarks/bench_simulator.py`.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import fastjsonschema
import jsonschema
import numpy as np

from generators.tools.base import (DOMAIN_ENTITY_TYPES, DOMAINS, ENTITY_TYPE_ALIASES, GENERAL, base_rows,
                                   canonical, parameters_of)
from generators.tools.compute import COMPUTE, calculator_row
from generators.tools.compute import answer as calculate
from generators.tools.corpus_bank import assignments, bank_of, is_corpus_tool, kind_of, tokens_of
from generators.tools.fill import roles_of
from generators.tools.imported import is_imported
from generators.tools.retrieval import BM25Index, Scored
from generators.tools.retriever import Corpus, Retriever, ranked_ids
from generators.tools.retriever import build as build_retriever
from generators.tools.sim_call import (MODES, SimCall, Without, answers_pattern, fast_check, results_message,
                                      tool_error, unknown_tool)
from generators.tools.snippets import Snippets, norm
from storage.schema import meta_dict

NOT_QUERY = {"query", "top_k", "language"}  # optional arguments that do not add search terms


@dataclass
class SimConfig:
    """How the simulator shapes its results."""

    default_k: int = field(default=5, metadata={"help": "results per call when the call gives no top_k"})
    snippet_chars: int = field(default=320, metadata={"help": "longest snippet of a non-golden result"})
    golden_chars: int = field(default=1500, metadata={"help": "longest snippet of a golden result (supporting sentences always kept)"})
    insufficient_chars: int = field(default=160, metadata={"help": "longest snippet of a result in 'insufficient' mode"})
    stopwords: str = field(default="en", metadata={"help": "bm25s stopword list"})


def _entity_type(meta: Any) -> str | None:
    meta = meta_dict(meta)
    t = meta.get("entity_type") or meta.get("type")
    if not isinstance(t, str):
        return None
    t = t.strip().lower()
    return ENTITY_TYPE_ALIASES.get(t, t)


def domain_for(meta: Any) -> str:
    """The domain tool meant for a document with this `meta`: its entity type if typed, else
    the general search (what `Simulator.domain_of` says, without building an index)."""
    t = _entity_type(meta)
    return t if t in DOMAIN_ENTITY_TYPES else GENERAL



class Simulator:
    """BM25 search over documents plus the tool-call semantics described in the module docstring."""

    def __init__(self, documents: Iterable[dict] | Any, seed: int = 0, tools: Sequence[dict] | None = None,
                 config: SimConfig | None = None, retriever: str | Retriever = "bm25", index_dir: Any = None):
        self.seed = seed
        self.config = config or SimConfig()
        corpus = Corpus.of(documents)
        docs = dict(zip(corpus.doc_ids, corpus.docs))
        self.doc_ids = corpus.doc_ids  # sorted: index order is the tie-break order
        self.index_of = {d: i for i, d in enumerate(self.doc_ids)}
        self.titles, self.texts = corpus.titles, corpus.texts
        self.types = [_entity_type(docs[d].get("meta")) for d in self.doc_ids]
        codes = {t: c for c, t in enumerate(sorted({t for t in self.types if t}))}
        self._type_codes = np.array([codes.get(t, -1) if t else -1 for t in self.types], dtype=np.int64)
        self._codes = codes
        self._pools: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        typed = {t for ts in DOMAIN_ENTITY_TYPES.values() for t in ts}
        types = np.array([t if t in typed else "" for t in self.types], dtype=object)
        untyped = types == ""
        self.masks = {GENERAL: np.ones(len(self.doc_ids), dtype=bool)}
        for dom, ets in DOMAIN_ENTITY_TYPES.items():
            self.masks[dom] = untyped | np.isin(types, list(ets))
        # a corpus bank's tools (generators/tools/corpus_bank.py) see the passages of their kind or cluster
        own = [row for row in tools or [] if is_corpus_tool(row)]
        banks = assignments(own, [kind_of(docs[d].get("meta")) for d in self.doc_ids],
                            lambda i: tokens_of(f"{self.titles[i]}\n{self.texts[i]}")) if own else {}
        self.corpus_domains: list[str | None] = [None] * len(self.doc_ids)
        for got in banks.values():
            self.corpus_domains = [a or b for a, b in zip(self.corpus_domains, got)]
        arrays = {b: np.array([d or "" for d in got], dtype=object) for b, got in banks.items()}
        for row in own:
            dom = arrays[bank_of(row)]
            self.masks.setdefault(row["domain"], (dom == "") | (dom == row["domain"]))
        # the retriever (generators/tools/retriever.py); bm25's index also tokenizes snippets' sentences
        self.index = retriever if not isinstance(retriever, str) else build_retriever(
            retriever, corpus, self.config.stopwords, index_dir)
        self.words = self.index if isinstance(self.index, BM25Index) else BM25Index([], self.config.stopwords)
        self.snippets = Snippets(self.texts, self.words.tokenize)  # (generators/tools/snippets.py)
        self._recent: dict[str, Scored] = {}  # the last batches' candidates by query (`retrieved`)
        self.tools: dict[str, tuple[str, dict, jsonschema.Draft202012Validator]] = {}
        self.search_args: dict[str, tuple[str, tuple[str, ...] | None, str | None]] = {}
        self._fast: dict[str, Any] = {}
        for row in list(base_rows()) + [calculator_row()] + list(tools or []):
            schema = parameters_of(row)
            self.tools[row["name"]] = (row["domain"], row, jsonschema.Draft202012Validator(schema))
            self._fast[row["name"]] = fast_check(schema)
            roles = roles_of(schema)  # an imported tool searches with its lookup and name arguments only
            names = roles.names if is_imported(row) else None
            self.search_args[row["name"]] = (roles.lookup or "query", names, roles.k)
        for row in base_rows():  # a bare domain name means that domain's base tool
            self.tools.setdefault(row["domain"], self.tools[row["name"]])
            self._fast.setdefault(row["domain"], self._fast[row["name"]])
            self.search_args.setdefault(row["domain"], self.search_args[row["name"]])

    # -- plain search -------------------------------------------------------------------
    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document (index order) for `query` (the bm25 retriever only)."""
        return self.index.scores(query)

    def search(self, query: str, k: int = 5, domain: str | None = None) -> list[dict]:
        """Raw retrieval: [{"doc_id", "title", "score"}] best first (the retriever's candidates)."""
        mask = self.masks.get(domain or GENERAL)
        if mask is None:
            raise ValueError(f"unknown domain {domain!r}; one of {', '.join(DOMAINS)}")
        hits = self.index.score_many([query])[0]
        at = dict(zip(hits.docs.tolist(), hits.scores.tolist()))
        return [{"doc_id": self.doc_ids[i], "title": self.titles[i], "score": round(at[i], 4)}
                for i in BM25Index.top(hits, mask, (), k)]

    # -- helpers for trajectory builders ------------------------------------------------
    def domain_of(self, doc_id: str) -> str:
        """The domain tool meant for a document: its corpus tool's (when the bank has corpus
        tools), else its entity type if typed, else the general search."""
        i = self.index_of[doc_id]
        if self.corpus_domains[i]:
            return self.corpus_domains[i]
        t = self.types[i]
        return t if t in DOMAIN_ENTITY_TYPES else GENERAL

    def tool_domain(self, tool: str) -> str | None:
        return self.tools[tool][0] if tool in self.tools else None

    def visible(self, tool: str, doc_id: str) -> bool:
        """Whether `tool` can return `doc_id` at all (domain filter)."""
        return tool in self.tools and bool(self.masks[self.tools[tool][0]][self.index_of[doc_id]])

    # -- tool calls -----------------------------------------------------------------------
    def _pool(self, domain: str, types: set[str]) -> tuple[np.ndarray, np.ndarray]:
        """The documents a domain's tool can see, split into those of `types` and the others
        (ascending indices)."""
        key = (domain, frozenset(types))
        pool = self._pools.get(key)
        if pool is None:
            same = np.isin(self._type_codes, [self._codes[t] for t in types if t in self._codes])
            mask = self.masks[domain]
            pool = self._pools[key] = (np.flatnonzero(mask & same), np.flatnonzero(mask & ~same))
        return pool

    def _fill(self, rng: random.Random, domain: str, taken: set[int], types: set[str], m: int) -> list[int]:
        """`m` more in-mask documents, same entity types as the golden docs first, chosen by rng."""
        if m <= 0:
            return []
        same, other = self._pool(domain, types)
        drop = sorted(taken)

        def without(a: np.ndarray) -> Without:
            pos = np.searchsorted(a, drop)
            return Without(a, [int(p) for p, t in zip(pos, drop) if p < len(a) and a[p] == t])

        same_w = without(same)
        out = rng.sample(same_w, min(m, len(same_w)))
        if len(out) < m:
            other_w = without(other)
            out += rng.sample(other_w, min(m - len(out), len(other_w)))
        return out

    def _error(self, code: str, detail: str) -> str:
        return tool_error(code, detail)

    def validate(self, tool: str, arguments: Any) -> str | None:
        """None if `arguments` fit the tool's schema, else a deterministic detail message."""
        if not isinstance(arguments, dict):
            return f"arguments must be a JSON object, got {type(arguments).__name__}"
        fast = self._fast.get(tool)
        if fast is not None:
            try:
                fast(arguments)
                return None
            except fastjsonschema.JsonSchemaValueException:
                pass  # the detail message is jsonschema's
        errors = sorted(self.tools[tool][2].iter_errors(arguments),
                        key=lambda e: ([str(p) for p in e.absolute_path], e.message))
        if not errors:
            return None
        return "; ".join(f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in errors[:5])

    @staticmethod
    def _terms(arguments: dict, lookup: str, names: tuple[str, ...] | None) -> list[str]:
        """The BM25 query words of a call (see the module docstring)."""
        extra = names if names is not None else [a for a in sorted(arguments) if a not in NOT_QUERY and a != lookup]
        words = [arguments.get(lookup, "")]
        for a in extra:
            words += arguments[a] if isinstance(arguments.get(a), list) else [arguments.get(a)]
        return [str(w) for w in words if isinstance(w, (str, int, float))]

    def call(self, tool: str, arguments: Any, *, golden_doc_ids: Sequence[str] = (), mode: str = "good",
             k: int | None = None, supporting: Sequence[str] = (), answers: Sequence[str] = ()) -> str:
        """The tool message content (a JSON string) for one call; see the module docstring.

        `supporting`: the supporting-fact sentences of the golden docs (kept in "good", removed
        in "insufficient"); `answers`: answer strings whose sentences are removed in
        "insufficient". Pass the same values again to replay a call byte for byte."""
        return self.calls([SimCall(tool, arguments, golden_doc_ids, mode, k, supporting, answers)])[0]

    def calls(self, batch: Sequence[SimCall]) -> list[str]:
        """The tool messages of many calls, each exactly what `call` gives for it (`answers`);
        the first call that cannot be answered raises its error."""
        out = self.answers(batch)
        bad = next((x for x in out if isinstance(x, Exception)), None)
        if bad is not None:
            raise bad
        return out

    def answers(self, batch: Sequence[SimCall], keys: Sequence[str] | None = None,
                texts: dict[str, str] | None = None) -> list[str | Exception]:
        """For each call, its tool message, or the error that stops it (ValueError: a bad mode,
        a golden id not in the corpus; KeyError, TypeError: arguments of the wrong shape). The
        searches of the batch go to the index at once (`BM25Index.score_many`), and a call
        asked twice is answered once (`keys`: the calls' identities when the caller has them,
        equal for equal calls; else SimCall.key). `texts`, when given, gets the plain text of
        each search's message (its string leaves, as generators/synth/grounding.py
        `plain_text` reads the message), which the grounding check then need not parse."""
        if keys is None:  # (a call alone has nothing to be asked with)
            keys = [c.key() for c in batch] if len(batch) > 1 else [None] * len(batch)
        keys = list(keys)
        first: dict[str, int] = {}
        todo = [i for i, k in enumerate(keys) if k is None or first.setdefault(k, i) == i]
        out: dict[int, Any] = {}
        for i in todo:
            try:
                out[i] = self._prepare(batch[i])
            except (ValueError, KeyError, TypeError) as e:
                out[i] = e
        searches = [i for i in todo if isinstance(out[i], tuple)]
        found = self.index.score_many([out[i][0] for i in searches])
        if not isinstance(self.index, BM25Index):  # (what `retrieved` reads: the last batches' candidates)
            if len(self._recent) > 65_536:
                self._recent.clear()
            self._recent.update((out[i][0], sc) for i, sc in zip(searches, found))
        for i, scored in zip(searches, found):
            try:
                out[i] = self._answer(batch[i], *out[i], scored, texts)
            except (ValueError, KeyError, TypeError) as e:
                out[i] = e
        return [out[i] if k is None else out[first[k]] for i, k in enumerate(keys)]

    @property
    def retriever(self) -> dict:
        """What trajectories record of the retriever: {"retriever": name, "fingerprint": ...}."""
        return {"retriever": self.index.name, "fingerprint": self.index.fingerprint}

    def retrieved(self, c: SimCall) -> str | None:
        """A hash of the candidates the retriever gives `c`'s search, best first (asked again
        unless a recent batch asked it); None when the simulator searches with bm25 (nothing
        is recorded for it) or the call searches nothing."""
        if isinstance(self.index, BM25Index):
            return None
        try:
            prep = self._prepare(c)
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(prep, tuple):
            return None
        scored = self._recent.get(prep[0])
        if scored is None:
            scored = self.index.score_many([prep[0]])[0]
        return ranked_ids(scored, self.doc_ids)

    def _prepare(self, c: SimCall) -> str | tuple[str, str, str | None]:
        """A call's message when it needs no search (an error, the calculator), else (its query,
        its tool's domain, its top-k argument name)."""
        if c.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {c.mode!r}")
        if c.tool not in self.tools:
            return unknown_tool(c.tool)
        detail = self.validate(c.tool, c.arguments)
        if detail:
            return self._error("invalid_arguments", detail)
        domain = self.tools[c.tool][0]
        if domain == COMPUTE:  # the calculator searches nothing (generators/tools/compute.py)
            return calculate(c.arguments[self.search_args[c.tool][0]])
        unknown = [g for g in c.golden_doc_ids if g not in self.index_of]
        if unknown:
            raise ValueError(f"golden doc ids not in the corpus: {unknown[:5]}")
        lookup, names, k_arg = self.search_args[c.tool]
        return " ".join(self._terms(c.arguments, lookup, names)), domain, k_arg

    def _answer(self, c: SimCall, query: str, domain: str, k_arg: str | None, scored: Scored,
                texts: dict[str, str] | None = None) -> str:
        """The results of one search call (module docstring), from its query's scores; its
        plain text goes to `texts` (`answers`)."""
        mask, mode, supporting = self.masks[domain], c.mode, c.supporting
        n = int((c.arguments.get(k_arg) if k_arg else None) or c.k or self.config.default_k)
        golden = sorted({self.index_of[g] for g in c.golden_doc_ids})
        seen_golden = [i for i in golden if mask[i]]
        key = canonical([self.seed, c.tool, c.arguments, mode, [self.doc_ids[i] for i in golden], n,
                         list(supporting), list(c.answers)])
        rng = random.Random(int(hashlib.sha256(key.encode()).hexdigest()[:16], 16))

        qtoks = set(self.words.tokens(query))
        gtypes = {self.types[i] for i in golden if self.types[i]}
        # (a good call shows what it finds: only the other modes hide the answers)
        answers_re = answers_pattern(tuple(c.answers)) if c.answers and mode != "good" else None
        support = [norm(x) for x in supporting if x.strip()]

        results: list[tuple[int, str]] = []
        if mode == "good":
            n = max(n, len(seen_golden))
            results += [(i, self.snippets.snippet(i, qtoks, self.config.golden_chars, must_n=support)) for i in seen_golden]
        elif mode == "insufficient" and (supporting or answers_re):
            for i in seen_golden:
                if answers_re and answers_re.search(self.titles[i]):
                    continue
                snip = self.snippets.snippet(i, qtoks, self.config.insufficient_chars, drop_n=support, answers_re=answers_re)
                if snip:
                    results.append((i, snip))
        taken = set(golden)
        others = BM25Index.top(scored, mask, taken, n - len(results))
        others += self._fill(rng, domain, taken | set(others), gtypes, n - len(results) - len(others))
        limit = self.config.insufficient_chars if mode == "insufficient" else self.config.snippet_chars
        hide = mode != "good"  # copies of the needed fact in other documents must not leak
        for i in others:
            if hide and answers_re and answers_re.search(self.titles[i]):
                continue  # a page named after the answer would give it away
            snip = self.snippets.snippet(i, qtoks, limit, drop_n=support if hide else (),
                                 answers_re=answers_re if hide else None)
            if snip or not hide:
                results.append((i, snip))
        rng.shuffle(results)
        out = [(self.doc_ids[i], self.titles[i], s) for i, s in results]
        message = results_message(out)
        if texts is not None:
            leaves = [v for r in out for v in r]
            if all(type(v) is str for v in leaves):
                texts[message] = "\n".join(leaves)
        return message

"""Deterministic BM25 tool simulator: answers virtual tool calls from the corpus documents.

One bm25s index over all documents (passage = title + text; one passage per document, so a
golden doc id maps to exactly one result); a domain tool only sees documents of its entity
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
{"error": "unknown_tool", ...}. `search(query, k, domain)` is plain BM25 for other callers.
The calculator (generators/tools/compute.py) is known to every simulator and answered there.
The BM25 query of a call is its lookup argument plus, for a base tool or variant, every other
scalar argument but top_k and language; an imported tool (generators.tools.imported) searches
its domain like that domain's base tool, with its lookup and its name arguments only.
Benchmark: `python benchmarks/bench_simulator.py`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import bm25s
import jsonschema
import numpy as np

from generators.tools.base import (DOMAIN_ENTITY_TYPES, DOMAINS, ENTITY_TYPE_ALIASES, GENERAL, base_rows,
                                   canonical, parameters_of)
from generators.tools.compute import COMPUTE, calculator_row
from generators.tools.compute import answer as calculate
from generators.tools.fill import roles_of
from generators.tools.imported import is_imported

logging.getLogger("bm25s").setLevel(logging.WARNING)  # its index-building DEBUG lines are noise here

MODES = ("good", "bad", "insufficient")
NOT_QUERY = {"query", "top_k", "language"}  # optional arguments that do not add search terms
_SENT_RE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])")


@dataclass
class SimConfig:
    """How the simulator shapes its results."""

    default_k: int = field(default=5, metadata={"help": "results per call when the call gives no top_k"})
    snippet_chars: int = field(default=320, metadata={"help": "longest snippet of a non-golden result"})
    golden_chars: int = field(default=1500, metadata={"help": "longest snippet of a golden result (supporting sentences always kept)"})
    insufficient_chars: int = field(default=160, metadata={"help": "longest snippet of a result in 'insufficient' mode"})
    stopwords: str = field(default="en", metadata={"help": "bm25s stopword list"})


def split_sentences(text: str) -> list[str]:
    """Sentences of a passage (simple punctuation rule; keeps the original wording)."""
    return [s.strip() for s in _SENT_RE.split(text.strip()) if s.strip()]


def _norm(s: str) -> str:
    return " ".join(s.lower().split())


def _entity_type(meta: Any) -> str | None:
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError:
            return None
    if not isinstance(meta, dict):
        return None
    t = meta.get("entity_type") or meta.get("type")
    if not isinstance(t, str):
        return None
    t = t.strip().lower()
    return ENTITY_TYPE_ALIASES.get(t, t)


class Simulator:
    """BM25 search over documents plus the tool-call semantics described in the module docstring."""

    def __init__(self, documents: Iterable[dict] | Any, seed: int = 0, tools: Sequence[dict] | None = None,
                 config: SimConfig | None = None):
        self.seed = seed
        self.config = config or SimConfig()
        if hasattr(documents, "to_pylist"):
            documents = documents.to_pylist()
        docs: dict[str, dict] = {}
        for d in sorted(documents, key=lambda d: (str(d["doc_id"]), d.get("title") or "", d.get("text") or "")):
            docs.setdefault(str(d["doc_id"]), d)
        self.doc_ids = list(docs)  # sorted: index order is the tie-break order
        self.index_of = {d: i for i, d in enumerate(self.doc_ids)}
        self.titles = [docs[d].get("title") or "" for d in self.doc_ids]
        self.texts = [docs[d].get("text") or "" for d in self.doc_ids]
        self.types = [_entity_type(docs[d].get("meta")) for d in self.doc_ids]
        self._sentences: dict[int, list[str]] = {}
        self._sent_tokens: dict[int, list[set[str]]] = {}
        typed = {t for ts in DOMAIN_ENTITY_TYPES.values() for t in ts}
        types = np.array([t if t in typed else "" for t in self.types], dtype=object)
        untyped = types == ""
        self.masks = {GENERAL: np.ones(len(self.doc_ids), dtype=bool)}
        for dom, ets in DOMAIN_ENTITY_TYPES.items():
            self.masks[dom] = untyped | np.isin(types, list(ets))
        corpus = self._tokenize([f"{t}\n{x}" for t, x in zip(self.titles, self.texts)])
        self.retriever = bm25s.BM25()
        if self.doc_ids:
            self.retriever.index(corpus, show_progress=False)
        self.tools: dict[str, tuple[str, dict, jsonschema.Draft202012Validator]] = {}
        self.search_args: dict[str, tuple[str, tuple[str, ...] | None, str | None]] = {}
        for row in list(base_rows()) + [calculator_row()] + list(tools or []):
            schema = parameters_of(row)
            self.tools[row["name"]] = (row["domain"], row, jsonschema.Draft202012Validator(schema))
            roles = roles_of(schema)  # an imported tool searches with its lookup and name arguments only
            names = roles.names if is_imported(row) else None
            self.search_args[row["name"]] = (roles.lookup or "query", names, roles.k)
        for row in base_rows():  # a bare domain name means that domain's base tool
            self.tools.setdefault(row["domain"], self.tools[row["name"]])
            self.search_args.setdefault(row["domain"], self.search_args[row["name"]])

    # -- plain search -------------------------------------------------------------------
    def _tokenize(self, texts: list[str]) -> list[list[str]]:
        return bm25s.tokenize(texts, stopwords=self.config.stopwords, return_ids=False, show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document (index order) for `query`."""
        toks = self._tokenize([query])[0] if query else []
        ids = self.retriever.get_tokens_ids([t for t in toks if t]) if self.doc_ids else []
        if not ids:
            return np.zeros(len(self.doc_ids), dtype=np.float32)
        return self.retriever.get_scores_from_ids(ids)

    def _rank(self, scores: np.ndarray, mask: np.ndarray, exclude: Iterable[int], m: int) -> list[int]:
        """Top-m document indices with a positive score inside `mask`; ties broken by doc_id."""
        if m <= 0:
            return []
        s = np.where(mask, scores, -np.inf)
        ex = list(exclude)
        if ex:
            s[ex] = -np.inf
        idx = np.flatnonzero(s > 0)
        if len(idx) > m:
            cut = np.partition(s[idx], len(idx) - m)[len(idx) - m]
            idx = idx[s[idx] >= cut]
        order = np.lexsort((idx, -s[idx]))
        return [int(i) for i in idx[order][:m]]

    def search(self, query: str, k: int = 5, domain: str | None = None) -> list[dict]:
        """Raw BM25: [{"doc_id", "title", "score"}] best first (documents with a positive score)."""
        mask = self.masks.get(domain or GENERAL)
        if mask is None:
            raise ValueError(f"unknown domain {domain!r}; one of {', '.join(DOMAINS)}")
        sc = self.scores(query)
        return [{"doc_id": self.doc_ids[i], "title": self.titles[i], "score": round(float(sc[i]), 4)}
                for i in self._rank(sc, mask, (), k)]

    # -- helpers for trajectory builders ------------------------------------------------
    def domain_of(self, doc_id: str) -> str:
        """The domain tool meant for a document: its entity type if typed, else the general search."""
        t = self.types[self.index_of[doc_id]]
        return t if t in DOMAIN_ENTITY_TYPES else GENERAL

    def tool_domain(self, tool: str) -> str | None:
        return self.tools[tool][0] if tool in self.tools else None

    def visible(self, tool: str, doc_id: str) -> bool:
        """Whether `tool` can return `doc_id` at all (domain filter)."""
        return tool in self.tools and bool(self.masks[self.tools[tool][0]][self.index_of[doc_id]])

    # -- tool calls -----------------------------------------------------------------------
    def _sents(self, i: int) -> list[str]:
        if i not in self._sentences:
            sents = split_sentences(self.texts[i])
            self._sentences[i] = sents
            self._sent_tokens[i] = [set(t) for t in self._tokenize(sents)] if sents else []
        return self._sentences[i]

    def _snippet(self, i: int, qtoks: set[str], limit: int, must: Sequence[str] = (),
                 drop: Sequence[str] = (), answers_re: re.Pattern | None = None) -> str:
        sents = self._sents(i)
        must_n, drop_n = [_norm(x) for x in must if x.strip()], [_norm(x) for x in drop if x.strip()]

        def hits(s: str, keys: list[str]) -> bool:
            n = _norm(s)
            return any(k in n or (len(n) > 15 and n in k) for k in keys)

        keep = [j for j, s in enumerate(sents)
                if not (drop_n and hits(s, drop_n)) and not (answers_re and answers_re.search(s))]
        if sum(len(sents[j]) + 1 for j in keep) <= limit:
            return " ".join(sents[j] for j in keep)
        first = [j for j in keep if must_n and hits(sents[j], must_n)]
        rest = sorted((j for j in keep if j not in first),
                      key=lambda j: (-len(qtoks & self._sent_tokens[i][j]), j))
        chosen, used = [], 0
        for j in first + rest:
            if j in first or used + len(sents[j]) + 1 <= limit:
                chosen.append(j)
                used += len(sents[j]) + 1
        return " ".join(sents[j] for j in sorted(chosen))

    def _fill(self, rng: random.Random, mask: np.ndarray, taken: set[int], types: set[str], m: int) -> list[int]:
        """`m` more in-mask documents, same entity types as the golden docs first, chosen by rng."""
        if m <= 0:
            return []
        pool = [i for i in np.flatnonzero(mask).tolist() if i not in taken]
        same = [i for i in pool if self.types[i] in types]
        other = [i for i in pool if self.types[i] not in types]
        out = rng.sample(same, min(m, len(same)))
        if len(out) < m:
            out += rng.sample(other, min(m - len(out), len(other)))
        return out

    def _error(self, code: str, detail: str) -> str:
        return json.dumps({"error": code, "detail": detail}, ensure_ascii=False)

    def validate(self, tool: str, arguments: Any) -> str | None:
        """None if `arguments` fit the tool's schema, else a deterministic detail message."""
        if not isinstance(arguments, dict):
            return f"arguments must be a JSON object, got {type(arguments).__name__}"
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
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if tool not in self.tools:
            return self._error("unknown_tool", f"no tool named {tool!r}")
        detail = self.validate(tool, arguments)
        if detail:
            return self._error("invalid_arguments", detail)
        domain = self.tools[tool][0]
        if domain == COMPUTE:  # the calculator searches nothing (generators/tools/compute.py)
            return calculate(arguments[self.search_args[tool][0]])
        unknown = [g for g in golden_doc_ids if g not in self.index_of]
        if unknown:
            raise ValueError(f"golden doc ids not in the corpus: {unknown[:5]}")
        mask = self.masks[domain]
        lookup, names, k_arg = self.search_args[tool]
        n = int((arguments.get(k_arg) if k_arg else None) or k or self.config.default_k)
        golden = sorted({self.index_of[g] for g in golden_doc_ids})
        seen_golden = [i for i in golden if mask[i]]
        key = canonical([self.seed, tool, arguments, mode, [self.doc_ids[i] for i in golden], n,
                         list(supporting), list(answers)])
        rng = random.Random(int(hashlib.sha256(key.encode()).hexdigest()[:16], 16))

        query = " ".join(self._terms(arguments, lookup, names))
        qtoks = set(self._tokenize([query])[0])
        sc = self.scores(query)
        gtypes = {self.types[i] for i in golden if self.types[i]}
        answers_re = None
        if answers:
            alts = sorted({re.escape(a.strip()) for a in answers if a.strip()}, key=len, reverse=True)
            answers_re = re.compile(r"(?<!\w)(?:" + "|".join(alts) + r")(?!\w)", re.I) if alts else None

        results: list[tuple[int, str]] = []
        if mode == "good":
            n = max(n, len(seen_golden))
            results += [(i, self._snippet(i, qtoks, self.config.golden_chars, must=supporting)) for i in seen_golden]
        elif mode == "insufficient" and (supporting or answers_re):
            for i in seen_golden:
                if answers_re and answers_re.search(self.titles[i]):
                    continue
                snip = self._snippet(i, qtoks, self.config.insufficient_chars, drop=supporting, answers_re=answers_re)
                if snip:
                    results.append((i, snip))
        taken = set(golden)
        others = self._rank(sc, mask, taken, n - len(results))
        others += self._fill(rng, mask, taken | set(others), gtypes, n - len(results) - len(others))
        limit = self.config.insufficient_chars if mode == "insufficient" else self.config.snippet_chars
        hide = mode != "good"  # copies of the needed fact in other documents must not leak
        for i in others:
            if hide and answers_re and answers_re.search(self.titles[i]):
                continue  # a page named after the answer would give it away
            snip = self._snippet(i, qtoks, limit, drop=supporting if hide else (),
                                 answers_re=answers_re if hide else None)
            if snip or not hide:
                results.append((i, snip))
        rng.shuffle(results)
        out = [{"doc_id": self.doc_ids[i], "title": self.titles[i], "snippet": s} for i, s in results]
        return json.dumps({"results": out}, ensure_ascii=False)

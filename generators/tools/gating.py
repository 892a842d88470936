"""Dual gating of tool variants: embedding similarity (same meaning) and BM25 overlap (new wording).

A candidate variant of a base tool is accepted when
  - its embedding similarity to its base is in [min_similarity, max_similarity]
    (same meaning, but not a near copy),
  - it is not closer (embedding) to another domain's base tool than to its own,
  - its BM25 lexical overlap with the base is at most max_lexical_overlap, and
  - it is not a near duplicate of an already accepted sibling, its name is new and valid,
    and its parameters are a valid JSON Schema with `query` required.
Each decision is a GateResult with every score and one reason code ("accepted" or why not).

    from generators.tools.gating import Gate, GateConfig
    gate = Gate(GateConfig(min_similarity=0.6))
    results = gate.select(base_tool, candidates, keep=3)

Text compared: "<name with spaces>: <description>". Lexical overlap: BM25 weight share of the
base text's terms that the variant also uses, indexed over all base tools with bm25s
tokenisation (so common words like "search" weigh little), in [0, 1].
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

import bm25s
import jsonschema
import numpy as np

from generators.tools.base import BASE_TOOLS, BaseTool
from generators.tools.variants import MAX_NAME, NAME_RE, Candidate


@dataclass
class GateConfig:
    """Thresholds of the dual gate."""

    min_similarity: float = field(default=0.6, metadata={"help": "lowest embedding cosine to the base (same meaning)"})
    max_similarity: float = field(default=0.97, metadata={"help": "highest embedding cosine to the base (not a near copy)"})
    max_lexical_overlap: float = field(default=0.6, metadata={"help": "highest BM25 term-weight overlap with the base (lexically diverse)"})
    max_sibling_similarity: float = field(default=0.9, metadata={"help": "highest embedding cosine to an already accepted variant of the same base"})
    own_domain_margin: float = field(default=0.0, metadata={"help": "similarity to the own base must exceed every other base's by this margin"})


@dataclass
class GateResult:
    """One gated candidate: its text, scores and the decision."""

    domain: str
    name: str
    description: str
    parameters: dict
    method: str
    accepted: bool
    reason: str
    scores: dict = field(default_factory=dict)
    raw: str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("parameters")
        return d


def tool_text(name: str, description: str) -> str:
    """What the gate compares: the name as words, then the description."""
    return f"{name.replace('_', ' ').strip()}: {description.strip()}"


def _tokens(text: str) -> list[str]:
    return bm25s.tokenize([text], stopwords="en", return_ids=False, show_progress=False)[0]


class LexicalOverlap:
    """BM25 overlap of a text with each base tool, normalised by the base's own term weights."""

    def __init__(self, bases: Sequence[BaseTool] = BASE_TOOLS):
        self.domains = [b.domain for b in bases]
        corpus = [_tokens(tool_text(b.name, b.description)) for b in bases]
        self.retriever = bm25s.BM25()
        self.retriever.index(corpus, show_progress=False)
        self._base_tokens = {b.domain: sorted(set(toks)) for b, toks in zip(bases, corpus)}

    def _scores(self, tokens: Iterable[str]) -> np.ndarray:
        toks = sorted(set(tokens))
        ids = self.retriever.get_tokens_ids(toks)
        if not ids:
            return np.zeros(len(self.domains), dtype=np.float32)
        return self.retriever.get_scores_from_ids(ids)

    def overlap(self, text: str, domain: str) -> float:
        """Share of the base's BM25 term weight that `text` covers (0 = no shared term, 1 = all)."""
        i = self.domains.index(domain)
        full = float(self._scores(self._base_tokens[domain])[i])
        got = float(self._scores(_tokens(text))[i])
        return 0.0 if full <= 0 else min(1.0, got / full)


def check_parameters(parameters: dict) -> str | None:
    """None if `parameters` is a valid Draft 2020-12 object schema with `query` required, else a reason."""
    try:
        jsonschema.Draft202012Validator.check_schema(parameters)
    except jsonschema.SchemaError:
        return "bad_schema"
    props = parameters.get("properties") or {}
    if parameters.get("type") != "object" or "query" not in props or "query" not in (parameters.get("required") or []):
        return "query_not_required"
    if parameters.get("additionalProperties") is not False:
        return "open_schema"
    return None


class Gate:
    """Scores candidates against the base tools and decides accept / reject with a reason."""

    def __init__(self, config: GateConfig | None = None, embedder=None, bases: Sequence[BaseTool] = BASE_TOOLS):
        self.config = config or GateConfig()
        self.bases = list(bases)
        self.domains = [b.domain for b in self.bases]
        self._embedder = embedder
        self.lexical = LexicalOverlap(self.bases)
        self._base_vecs: np.ndarray | None = None

    @property
    def embedder(self):
        if self._embedder is None:
            from generators.tools.sentence_embedder import get_embedder
            self._embedder = get_embedder()
        return self._embedder

    def base_vectors(self) -> np.ndarray:
        if self._base_vecs is None:
            self._base_vecs = self.embedder.encode([tool_text(b.name, b.description) for b in self.bases])
        return self._base_vecs

    def score(self, cand: Candidate) -> dict:
        """Similarity to every base, to its own base, best other domain, and lexical overlap."""
        vec = self.embedder.encode([tool_text(cand.name, cand.description)])[0]
        sims = self.base_vectors() @ vec
        own = self.domains.index(cand.domain)
        others = [(round(float(s), 4), d) for d, s in zip(self.domains, sims) if d != cand.domain]
        best_other = max(others) if others else (0.0, None)
        return {"similarity": round(float(sims[own]), 4),
                "other_similarity": best_other[0], "other_domain": best_other[1],
                "lexical_overlap": round(self.lexical.overlap(tool_text(cand.name, cand.description), cand.domain), 4)}

    def check(self, cand: Candidate, siblings: Sequence[Candidate] = (), used_names: set[str] = frozenset()) -> GateResult:
        """Gate one candidate given the already accepted siblings and the names in use."""
        def result(ok: bool, reason: str, scores: dict | None = None) -> GateResult:
            return GateResult(cand.domain, cand.name, cand.description, cand.parameters, cand.method,
                              ok, reason, scores or {}, cand.raw)

        if cand.reject:
            return result(False, cand.reject)
        if not NAME_RE.match(cand.name or "") or len(cand.name) > MAX_NAME:
            return result(False, "bad_name")
        bad = check_parameters(cand.parameters)
        if bad:
            return result(False, bad)
        if cand.name in used_names:
            return result(False, "duplicate_name")
        c = self.config
        s = self.score(cand)
        if s["similarity"] < c.min_similarity:
            return result(False, "too_different", s)
        if s["other_similarity"] + c.own_domain_margin >= s["similarity"]:
            return result(False, "closer_to_other_domain", s)
        if s["similarity"] > c.max_similarity:
            return result(False, "near_copy", s)
        if s["lexical_overlap"] > c.max_lexical_overlap:
            return result(False, "lexical_overlap", s)
        if siblings:
            vec = self.embedder.encode([tool_text(cand.name, cand.description)])[0]
            sib = self.embedder.encode([tool_text(x.name, x.description) for x in siblings]) @ vec
            s["sibling_similarity"] = round(float(sib.max()), 4)
            if s["sibling_similarity"] > c.max_sibling_similarity:
                return result(False, "near_duplicate_sibling", s)
        return result(True, "accepted", s)

    def select(self, base: BaseTool, candidates: Sequence[Candidate], keep: int,
               used_names: set[str] | None = None) -> list[GateResult]:
        """Gate candidates in order until `keep` are accepted; returns every decision made.
        Accepted names are added to `used_names` (shared across domains by the caller)."""
        used = used_names if used_names is not None else {b.name for b in self.bases}
        accepted: list[Candidate] = []
        out: list[GateResult] = []
        for cand in candidates:
            if len(accepted) >= keep:
                break
            r = self.check(cand, accepted, used)
            out.append(r)
            if r.accepted:
                accepted.append(cand)
                used.add(cand.name)
        return out


def report_rows(results: Iterable[GateResult]) -> list[dict]:
    """Flat dicts for a table or JSON report (no parameters)."""
    return [r.to_dict() for r in results]


def dumps(results: Iterable[GateResult]) -> str:
    return json.dumps(report_rows(results), ensure_ascii=False, indent=1)

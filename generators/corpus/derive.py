"""Check a triple by program, not by a model: parse facts back out of the golden documents'
text with the renderer's own templates, run the triple's relation program over those facts
only, and compare the result with the stored answer.

A program (in the triple's `meta` JSON, key "program") is one of
  chain        [["Song of Osk", "publisher"], ["?", "founder"], ["?", "birth_year"]]
               start at a named entity, follow one relation per step ("?" = previous value)
  argmin/argmax {"op": "argmin", "candidates": [{"answer": "A", "chain": [...]}, ...]}
               the candidate whose chain value is smallest/largest (a tie is an error)
  absdiff      {"op": "absdiff", "args": [chain, chain]}  |a - b| of two numbers
  eq           {"op": "eq", "args": [expr, expr]}  -> "yes" / "no"
  const        {"const": "Vantria"}

    from generators.corpus.derive import check_triple
    result = check_triple(triple_row, {doc_id: (title, text), ...})
    result.ok, result.derived, result.reason
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from generators.corpus.names import parse_count, strip_article
from generators.corpus.relations import format_value, value_kind
from generators.corpus.templates import POSSESSIVES, PRONOUNS, TEMPLATES, Template

SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+")
LIST_SPLIT = re.compile(r", | and ")
WORD_RE = re.compile(r"\w+")
SLOT_SPLIT = re.compile(r"\{[^}]*\}")


def _literal_words(text: str) -> list[str]:
    """Words of a template's fixed text that stay whole words in any rendering (not glued
    to a slot)."""
    out = []
    pieces = SLOT_SPLIT.split(text)
    for i, piece in enumerate(pieces):
        for m in WORD_RE.finditer(piece):
            glued_left = m.start() == 0 and i > 0
            glued_right = m.end() == len(piece) and i < len(pieces) - 1
            if not (glued_left or glued_right):
                out.append(m.group())
    if not out:
        raise ValueError(f"template has no whole literal word to index: {text!r}")
    return out


class DerivationError(ValueError):
    """The program cannot run on the given facts (a fact is missing, ambiguous or tied)."""


@dataclass(frozen=True)
class Fact:
    subject: str
    rel: str
    value: object
    sentence: str


def split_sentences(text: str) -> list[str]:
    return [s for s in SENTENCE_SPLIT.split(text.strip()) if s]


def _convert(rel: str, raw: str):
    kind = value_kind(rel)
    if kind in ("year",):
        return int(raw)
    if kind == "number":
        return int(raw.replace(",", ""))
    if kind == "count":
        return parse_count(raw)
    if kind == "list":
        return [strip_article(x) for x in LIST_SPLIT.split(raw)]
    if kind in ("literal", "literal_name"):
        return raw
    return strip_article(raw)


class Extractor:
    """Reads (subject, relation, value) facts from rendered sentences.

    Each template is filed under one "anchor", a whole word of its fixed text (the rarest
    among templates); a sentence is tried only against templates whose anchor is one of its
    words, which gives the same matches as trying every template, only faster."""

    def __init__(self, templates: list[Template] = TEMPLATES):
        seen, self.templates = set(), []
        for t in templates:
            if t.rels and t.text not in seen:
                seen.add(t.text)
                self.templates.append(t)
        words = {id(t): _literal_words(t.text) for t in self.templates}
        freq: dict[str, int] = {}
        for ws in words.values():
            for w in set(ws):
                freq[w] = freq.get(w, 0) + 1
        self.by_anchor: dict[str, list[Template]] = {}
        for t in self.templates:
            anchor = min(words[id(t)], key=lambda w: (freq[w], w))
            self.by_anchor.setdefault(anchor, []).append(t)

    def matches(self, sentence: str) -> list[tuple[Template, re.Match]]:
        """Every template that matches the whole sentence, with its match."""
        out = []
        for word in dict.fromkeys(WORD_RE.findall(sentence)):
            for t in self.by_anchor.get(word, ()):
                m = t.compiled[0].match(sentence)
                if m:
                    out.append((t, m))
        return out

    def sentence_facts(self, sentence: str, title: str) -> list[Fact]:
        """Facts a sentence states; pronoun subjects refer to the document's title."""
        facts: list[Fact] = []
        for t, m in self.matches(sentence):
            d = m.groupdict()
            if d.get("s") is not None:
                subject = title if d["s"] in PRONOUNS else strip_article(d["s"])
            elif d.get("S") is not None:
                subject = strip_article(d["S"])
            elif d.get("Sp") is not None and d["Sp"] in POSSESSIVES:
                subject = title
            else:
                subject = title
            for group, rel in t.compiled[1].items():
                fact = Fact(subject, rel, _convert(rel, d[group]), sentence)
                if fact not in facts:
                    facts.append(fact)
        return facts

    def doc_facts(self, title: str, text: str) -> list[Fact]:
        return [f for s in split_sentences(text) for f in self.sentence_facts(s, title)]


EXTRACTOR = Extractor()


class FactBase:
    """Facts from a set of documents, looked up by (subject, relation)."""

    def __init__(self, facts: list[Fact]):
        self.facts: dict[tuple[str, str], list[Fact]] = {}
        for f in facts:
            bucket = self.facts.setdefault((f.subject, f.rel), [])
            if all(g.value != f.value for g in bucket):
                bucket.append(f)
        self.used: list[Fact] = []

    @classmethod
    def from_docs(cls, docs: list[tuple[str, str]], extractor: Extractor = EXTRACTOR,
                  cache: dict | None = None) -> "FactBase":
        """Facts of (title, text) documents; `cache` (keyed by (title, text)) saves re-parsing."""
        facts = []
        for title, text in docs:
            if cache is None:
                facts += extractor.doc_facts(title, text)
                continue
            key = (title, text)
            if key not in cache:
                cache[key] = extractor.doc_facts(title, text)
            facts += cache[key]
        return cls(facts)

    def get(self, subject: str, rel: str):
        bucket = self.facts.get((subject, rel))
        if not bucket:
            raise DerivationError(f"no fact ({subject!r}, {rel})")
        if len(bucket) > 1:
            raise DerivationError(f"ambiguous fact ({subject!r}, {rel}): {[f.value for f in bucket]}")
        self.used.append(bucket[0])
        return bucket[0].value


def run_chain(chain: list, facts: FactBase):
    value = None
    for i, (subject, rel) in enumerate(chain):
        if subject == "?":
            if i == 0:
                raise DerivationError("a chain cannot start with '?'")
            subject = value
        value = facts.get(subject, rel)
    return value


def evaluate(expr, facts: FactBase):
    """The raw value of a program expression."""
    if isinstance(expr, list):
        return run_chain(expr, facts)
    if "const" in expr:
        return expr["const"]
    op = expr.get("op")
    if op in ("argmin", "argmax"):
        scored = [(run_chain(c["chain"], facts), c["answer"]) for c in expr["candidates"]]
        values = [v for v, _ in scored]
        if len(set(values)) != len(values):
            raise DerivationError(f"tie in {op}: {values}")
        return (min if op == "argmin" else max)(scored)[1]
    if op == "absdiff":
        a, b = (evaluate(x, facts) for x in expr["args"])
        if not isinstance(a, int) or not isinstance(b, int):
            raise DerivationError("absdiff needs two numbers")
        return abs(a - b)
    if op == "eq":
        a, b = (evaluate(x, facts) for x in expr["args"])
        return "yes" if a == b else "no"
    raise DerivationError(f"unknown program {expr!r}")


def run_program(program, facts: FactBase) -> str:
    """The program's answer as the canonical answer string."""
    value = evaluate(program, facts)
    if isinstance(program, list):
        return format_value(program[-1][1], value)
    return str(value)


@dataclass
class Result:
    ok: bool
    derived: str | None
    reason: str | None
    used: list[Fact]


def check_triple(triple: dict, docs: dict[str, tuple[str, str]], extractor: Extractor = EXTRACTOR,
                 cache: dict | None = None) -> Result:
    """Derive the answer from the triple's golden documents only (`docs` maps doc_id to
    (title, text) and may hold more documents; only golden ones are read). `cache` is an
    optional dict reused across calls to avoid parsing a document twice."""
    try:
        meta = json.loads(triple.get("meta") or "{}")
        program = meta["program"]
    except (ValueError, KeyError):
        return Result(False, None, "no program in meta", [])
    missing = [d for d in triple["golden_doc_ids"] if d not in docs]
    golden = [docs[d] for d in triple["golden_doc_ids"] if d in docs]
    facts = FactBase.from_docs(golden, extractor, cache)
    try:
        derived = run_program(program, facts)
    except DerivationError as e:
        why = f"{e}" + (f" (golden docs not found: {missing})" if missing else "")
        return Result(False, None, why, facts.used)
    for sf in triple.get("supporting_facts") or []:
        if sf["doc_id"] not in triple["golden_doc_ids"] or sf["doc_id"] not in docs \
                or sf["sentence"] not in split_sentences(docs[sf["doc_id"]][1]):
            return Result(False, derived, f"supporting sentence not in its golden document: {sf['sentence']!r}",
                          facts.used)
    if derived != triple["answer"]:
        return Result(False, derived, f"derived {derived!r} but the answer is {triple['answer']!r}", facts.used)
    return Result(True, derived, None, facts.used)

"""Chains of passages for questions out of a corpus that has none (`forgeplay corpus questions`).

A chain is 2 or 3 passages, each linked to the next by a name the first one mentions:
  title      the next passage's title appears in this passage's text
  name       a frequent named span (a capitalised multi-word span found in 2 or more
             passages, and in few: not a hub) appears in both
  column     the passage's own `links` (in its meta: titles or doc ids of other passages)
  retriever  the next passage is among this passage's BM25 neighbours (generators/tools/
             retrieval.py; the link name is the next passage's title)
The answer is a span of the last passage the program picks (a capitalised name or a
number) that no earlier passage of the chain holds and that is no link name; each hop's
supporting fact is the sentence that carries its link (the last one's, the answer).
A chain's question construction path (`Chain.qcp`, generators/qcp.py, the shape
self-play records) starts at the first passage and searches each link name in turn.

    passages = load_passages(root, "mydocs")
    finder = ChainFinder(passages, links=("title", "name", "column", "retriever"))
    for chain in finder.chains(seed=0, hops=(2, 3), per_start=2): ...
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from random import Random
from typing import Iterator

from generators.answers import normalize
from generators.qcp import QCP, Step

LINKS = ("title", "name", "column", "retriever")
_CAP = r"[A-Z][\w'\u2019-]*"
NAME_RE = re.compile(rf"{_CAP}(?:\s+(?:(?:of|the|de|von|van|and)\s+)?{_CAP})*")
NUMBER_RE = re.compile(r"\b\d[\d,.]*\d\b|\b\d\b")
SENTENCE_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'])")
STOP_FIRST = {"The", "A", "An", "In", "On", "At", "It", "He", "She", "They", "His", "Her", "Its", "This", "That",
              "These", "Those", "There", "After", "Before", "When", "While", "From", "By", "As", "For", "With",
              "Since", "During", "Its", "Their", "Our", "We", "I", "You", "But", "And", "Or", "Of", "To"}
PASSAGE_CHARS = 600  # passage text shown in a QCP step and to a reader
MAX_NAME_DF = 0.2  # a named span in more than this share of passages is a hub, not a link


@dataclass(frozen=True)
class Passage:
    doc_id: str
    title: str
    text: str
    links: tuple[str, ...] = ()


@dataclass(frozen=True)
class Chain:
    """Passages in hop order, the name and kind of each link, the answer and each hop's sentence."""

    passages: tuple[Passage, ...]
    names: tuple[str, ...]  # link name into passages[i + 1]
    vias: tuple[str, ...]  # how each link was found (LINKS)
    answer: str
    sentences: tuple[str, ...]  # supporting sentence of each passage

    @property
    def doc_ids(self) -> list[str]:
        return [p.doc_id for p in self.passages]

    @property
    def chain_id(self) -> str:
        key = "\x1f".join(self.doc_ids + [self.answer])
        return hashlib.sha256(key.encode()).hexdigest()[:24]

    @property
    def qcp(self) -> QCP:
        """The question construction path: start at the first passage, search each link name."""
        steps = []
        for i, (name, nxt) in enumerate(zip(self.names, self.passages[1:])):
            note = f"{self.passages[i].title} mentions {name}: {self.sentences[i]}"
            if i == len(self.names) - 1:
                note += f" The answer, {self.answer}, is on {nxt.title}: {self.sentences[-1]}"
            steps.append(Step(name, (nxt.doc_id,), (snippet(nxt.text),), note))
        return QCP(tuple(steps), self.passages[0].doc_id)


def snippet(text: str) -> str:
    return text if len(text) <= PASSAGE_CHARS else text[:PASSAGE_CHARS].rsplit(" ", 1)[0] + " ..."


def sentences(text: str) -> list[str]:
    return [s.strip() for s in SENTENCE_RE.split(text) if s.strip()]


def named_spans(text: str) -> list[str]:
    """Capitalised spans of `text` ("Harlow Ridge", "Order of the Lantern"), a leading
    article or sentence word dropped."""
    out = []
    for m in NAME_RE.finditer(text):
        words = m.group(0).split()
        while words and words[0] in STOP_FIRST:
            words = words[1:]
        if words:
            out.append(" ".join(words))
    return out


def contains(text: str, phrase: str) -> bool:
    """Whether `phrase` occurs in `text` as whole words (after answers.normalize)."""
    p = normalize(phrase)
    return bool(p) and f" {p} " in f" {normalize(text)} "


def load_passages(root, dataset: str) -> list[Passage]:
    """Every document of `dataset` as a Passage (read shard by shard; one row per doc_id);
    `links` from the meta's `links` list when it has one."""
    from storage.reader import iter_tables

    seen, out = set(), []
    for t in iter_tables(dataset, "documents", root, columns=["doc_id", "title", "text", "meta"]):
        for r in t.to_pylist():
            if r["doc_id"] in seen or not (r.get("text") or "").strip():
                continue
            seen.add(r["doc_id"])
            try:
                meta = json.loads(r["meta"]) if r.get("meta") else {}
            except ValueError:
                meta = {}
            if isinstance(meta, dict) and "links" not in meta:  # an imported document's own fields
                meta = meta.get("fields") if isinstance(meta.get("fields"), dict) else meta
            links = meta.get("links") if isinstance(meta, dict) else None
            links = tuple(str(x) for x in links) if isinstance(links, list) else ()
            out.append(Passage(r["doc_id"], r.get("title") or "", r["text"], links))
    return out


class ChainFinder:
    """The link graph of a corpus's passages and the chains through it (module docstring)."""

    def __init__(self, passages: list[Passage], links: tuple[str, ...] = LINKS, neighbours: int = 3):
        bad = [x for x in links if x not in LINKS]
        if bad:
            raise ValueError(f"unknown link kind {bad[0]!r}: choose from {', '.join(LINKS)}")
        self.passages, self.kinds, self.k = passages, tuple(links), neighbours
        self.pos = {p.doc_id: i for i, p in enumerate(passages)}
        self.by_title: dict[str, list[int]] = {}
        for i, p in enumerate(passages):
            if len(p.title) >= 3:
                self.by_title.setdefault(p.title, []).append(i)
        self.spans = [set(named_spans(p.text)) for p in passages]
        df: dict[str, int] = {}
        for s in self.spans:
            for name in s:
                df[name] = df.get(name, 0) + 1
        cap = max(2, int(MAX_NAME_DF * len(passages)))
        self.frequent = {n for n, c in df.items() if 2 <= c <= cap and len(n.split()) > 1 and n not in self.by_title}
        self.holders: dict[str, list[int]] = {}
        for i, s in enumerate(self.spans):
            for name in sorted(s & self.frequent):
                self.holders.setdefault(name, []).append(i)
        self._index = None
        self.no_answer = 0  # chains dropped because their last passage has no answer span
        self._cache: dict[int, list[tuple[str, int, str]]] = {}

    def index(self):
        """The BM25 index over the passages ("title\\ntext"), built on first use."""
        if self._index is None:
            from generators.tools.retrieval import BM25Index

            self._index = BM25Index([f"{p.title}\n{p.text}" for p in self.passages])
        return self._index

    def links(self, i: int) -> list[tuple[str, int, str]]:
        """(link name, passage index, kind) of the passages passage `i` leads to, one per passage."""
        if i in self._cache:
            return self._cache[i]
        p, out, seen = self.passages[i], [], {i}

        def add(name: str, j: int, via: str) -> None:
            if j not in seen:
                seen.add(j)
                out.append((name, j, via))

        if "column" in self.kinds:
            for ref in p.links:
                for j in ([self.pos[ref]] if ref in self.pos else self.by_title.get(ref, [])):
                    add(self.passages[j].title or ref, j, "column")
        if "title" in self.kinds:
            for name in sorted(self._mentioned_titles(p.text)):
                for j in self.by_title[name]:
                    add(name, j, "title")
        if "name" in self.kinds:
            for name in sorted(self.spans[i] & self.frequent):
                for j in self.holders[name]:
                    add(name, j, "name")
        if "retriever" in self.kinds and self.passages[i].text:
            idx = self.index()
            import numpy as np

            for j in idx.top(idx.score(f"{p.title}\n{p.text}"), np.ones(len(self.passages), bool), [i], self.k):
                if self.passages[j].title:
                    add(self.passages[j].title, j, "retriever")
        self._cache[i] = out
        return out

    def _mentioned_titles(self, text: str) -> set[str]:
        """Titles of passages that `text` mentions: every run of 1-6 words inside a capitalised span."""
        found = set()
        for m in NAME_RE.finditer(text):
            words = m.group(0).split()
            for a in range(len(words)):
                for b in range(a + 1, min(len(words), a + 6) + 1):
                    name = " ".join(words[a:b])
                    if name in self.by_title:
                        found.add(name)
        return found

    def answer_of(self, chain: list[int], names: list[str], rng: Random) -> tuple[str, str] | None:
        """(answer span, its sentence) in the last passage: a name or number no earlier passage
        holds and no link name or title of the chain contains; None when there is none."""
        last = self.passages[chain[-1]]
        earlier = f" {normalize(' '.join(self.passages[j].text + ' ' + self.passages[j].title for j in chain[:-1]))} "
        taken = f" {normalize(' '.join(names + [self.passages[j].title for j in chain]))} "
        options = []
        for sent in sentences(last.text):
            for span in dict.fromkeys(named_spans(sent) + NUMBER_RE.findall(sent)):
                norm = normalize(span)
                if not norm or f" {norm} " in earlier or f" {norm} " in taken or contains(span, last.title or "\x00"):
                    continue
                options.append((span, sent))
        return rng.choice(options) if options else None

    def sentence_with(self, text: str, name: str) -> str:
        return next((s for s in sentences(text) if contains(s, name)), sentences(text)[0] if text.strip() else "")

    def chains(self, seed: int = 0, hops: tuple[int, ...] = (2, 3), per_start: int = 2) -> Iterator[Chain]:
        """Chains from every passage in a seeded order, at most `per_start` of each length per start."""
        rng = Random(seed)
        order = list(range(len(self.passages)))
        rng.shuffle(order)
        for i in order:
            made = {h: 0 for h in hops}
            paths = [[i, j] for _, j, _ in self.links(i)]
            rng.shuffle(paths)
            for path in paths:
                for h in sorted(hops):
                    if made[h] >= per_start:
                        continue
                    full = self._extend(path, h, rng)
                    if full is not None:
                        chain = self._chain(full, rng)
                        if chain is not None:
                            made[h] += 1
                            yield chain
                if all(v >= per_start for v in made.values()):
                    break

    def _extend(self, path: list[int], hops: int, rng: Random) -> list[int] | None:
        while len(path) < hops:
            nxt = [j for _, j, _ in self.links(path[-1]) if j not in path]
            if not nxt:
                return None
            path = path + [rng.choice(nxt)]
        return path

    def _chain(self, path: list[int], rng: Random) -> Chain | None:
        names, vias, sents = [], [], []
        for a, b in zip(path, path[1:]):
            name, _, via = next(x for x in self.links(a) if x[1] == b)
            names.append(name)
            vias.append(via)
            sents.append(self.sentence_with(self.passages[a].text, name))
        picked = self.answer_of(path, names, Random(f"{rng.random()}"))
        if picked is None:
            self.no_answer += 1
            return None
        answer, sent = picked
        return Chain(tuple(self.passages[j] for j in path), tuple(names), tuple(vias), answer, tuple(sents + [sent]))

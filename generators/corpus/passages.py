"""Documents without questions: a `{title, text}` record split into passages, stored as
`documents` rows like the contexts of a question set (no triples).

A document record has `title` and `text` (`body`, `content` are read as the text), and may
have `id`/`_id`, `url`, `kind` or `category`; every other field is kept in the passage's meta.
A long text is cut into passages of at most `passage_words` words on sentence boundaries
(a sentence longer than that is cut by words), the next passage repeating the last
`passage_overlap` words' sentences of the one before. A passage row is

    {"doc_id": "doc-<hash of document id, passage index, passage text>", "title": <title>,
     "text": <passage>, "source": ..., "meta": {"doc": <document id>, "passage": i,
     "passages": n, "url"?, "kind"?, ...the record's other fields}}

The document id is the record's `id` when it has one, else a hash of its title and text, so
the same input always gives the same passages and ids. The simulator reads `kind` as the
passage's entity type (generators/tools/simulator.py), so kind-specific searches find it.

    rows = passages_of({"title": "Velmora", "text": long_text, "kind": "city"}, "import:pages.jsonl")
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from generators.corpus.ids import stable_hash

TEXT_KEYS = ("text", "body", "content")
KIND_KEYS = ("kind", "category")
_SENT_RE = re.compile(r"(?<=[.!?])\s+|\n\s*\n")


class DocumentError(ValueError):
    """A document record that cannot be imported; the message is the reason."""


@dataclass(frozen=True)
class Split:
    """How long texts are cut into passages."""

    passage_words: int = field(default=200, metadata={"help": "Longest passage, in words (a long text is cut into passages)."})
    passage_overlap: int = field(default=40, metadata={"help": "Words of the passage before that a passage repeats (whole sentences)."})

    def check(self) -> None:
        if self.passage_words < 10:
            raise ValueError(f"--passage-words must be at least 10, got {self.passage_words}")
        if not 0 <= self.passage_overlap < self.passage_words // 2:
            raise ValueError(f"--passage-overlap must be from 0 to half of --passage-words, got {self.passage_overlap}")


def is_document(rec: dict) -> bool:
    """A record without a question that has a text: a document to split into passages."""
    return "question" not in rec and "supporting_facts" not in rec and any(k in rec for k in TEXT_KEYS)


def split_text(text: str, split: Split = Split()) -> list[str]:
    """`text` as passages of at most `split.passage_words` words (see the module docstring)."""
    sents = []
    for s in _SENT_RE.split(text):
        words = s.split()
        for i in range(0, len(words), split.passage_words):  # a sentence longer than a passage is cut
            sents.append(words[i:i + split.passage_words])
    out, cur, start = [], [], 0  # cur: sentences of the passage being filled; start: those from the one before
    for words in sents:
        if cur and sum(map(len, cur)) + len(words) > split.passage_words:
            out.append(cur)
            keep, n = [], 0
            for s in reversed(cur):  # the overlap: last whole sentences, at most passage_overlap words
                if n + len(s) > split.passage_overlap or n + len(s) + len(words) > split.passage_words:
                    break
                keep.insert(0, s)
                n += len(s)
            cur, start = keep, len(keep)
        cur.append(words)
    if len(cur) > start or not out:
        out.append(cur)
    return [" ".join(w for s in p for w in s) for p in out if p]


def _field(rec: dict, keys: tuple[str, ...], what: str) -> str | None:
    for k in keys:
        v = rec.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise DocumentError(f"{k} is not text (got {type(v).__name__})")
        return str(v).strip()
    return None


def passages_of(rec: dict, source: str, split: Split = Split()) -> list[dict]:
    """The passage rows of one document record; DocumentError with the reason."""
    title = _field(rec, ("title",), "title")
    if title is None:
        raise DocumentError("missing title")
    text = _field(rec, TEXT_KEYS, "text")
    if not text:
        raise DocumentError("missing text" if text is None else "empty text")
    given = _field(rec, ("id", "_id"), "id")
    doc = given or "doc-" + stable_hash(title, text)
    meta = {k: v for k, v in rec.items() if k not in ("title", "id", "_id", *TEXT_KEYS, *KIND_KEYS) and v is not None}
    url, kind = meta.pop("url", None), _field(rec, KIND_KEYS, "kind")
    if url is not None and not isinstance(url, str):
        raise DocumentError("url is not text")
    parts = split_text(text, split)
    rows = []
    for i, passage in enumerate(parts):
        m = {"doc": doc, "passage": i, "passages": len(parts), **({"url": url} if url else {}),
             **({"kind": kind} if kind else {}), **({"fields": meta} if meta else {})}
        rows.append({"doc_id": "doc-" + stable_hash(doc, str(i), passage), "title": title, "text": passage,
                     "source": source, "meta": json.dumps(m, sort_keys=True, ensure_ascii=False, default=str)})
    return rows

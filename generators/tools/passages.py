"""What every retriever part shares (generators/tools/retriever.py): the corpus a simulator and
its retriever index (`Corpus`: passages in doc-id order, and its fingerprint), the hash that
fingerprints are made of, and the error of a retriever that cannot answer."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterable


class RetrieverError(RuntimeError):
    """A retriever that cannot answer (a server gone, a server's answer not about this corpus)."""


def text_hash(parts: Iterable[Any]) -> str:
    """A 16-hex hash of some strings (or JSON values) in order."""
    h = hashlib.sha256()
    for p in parts:
        b = (p if isinstance(p, str) else json.dumps(p, sort_keys=True)).encode()
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()[:16]


def _content(doc: dict) -> tuple[str, str]:
    return doc.get("title") or "", doc.get("text") or ""


@dataclass(frozen=True)
class Corpus:
    """The documents a simulator and its retriever index, in doc-id order (the tie-break order)."""

    doc_ids: list[str]
    titles: list[str]
    texts: list[str]
    docs: list[dict]

    @classmethod
    def of(cls, documents: Iterable[dict] | Any) -> "Corpus":
        """Sorted by (doc_id, title, text); the first of equal doc ids is kept."""
        if hasattr(documents, "to_pylist"):
            documents = documents.to_pylist()
        docs: dict[str, dict] = {}
        for d in documents:  # (of equal doc ids, the least (title, text): what a sort would put first)
            key = str(d["doc_id"])
            got = docs.setdefault(key, d)
            if got is not d and _content(d) < _content(got):
                docs[key] = d
        ids = sorted(docs)
        return cls(ids, [docs[d].get("title") or "" for d in ids], [docs[d].get("text") or "" for d in ids],
                   [docs[d] for d in ids])

    @cached_property
    def passages(self) -> list[str]:
        return [f"{t}\n{x}" for t, x in zip(self.titles, self.texts)]

    @cached_property
    def fingerprint(self) -> str:
        return text_hash([text_hash(self.doc_ids), text_hash(self.passages)])



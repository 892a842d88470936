"""The question construction path (QCP) as data: the steps by which a question was built
(one search per step: its query, the doc ids it returned, their passages, the note before
it) and the document it started from. Self-play's examiner records one per task
(selfplay/qcp.py reads it from the examiner's conversation); the corpus question builder
(generators/corpus/chains.py) writes one per chain of passages. `QCP.to_json()` is exactly
the `qcp` field of a `tasks` row (storage/schemas/tasks.json); `QCP.from_json` reads it back.

    qcp = QCP((Step("Harlow Ridge", ("d1",), ("Harlow Ridge is ...",)),), seed_doc_id="d0")
    QCP.from_json(qcp.to_json()) == qcp
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """One search of the examiner: query, retrieved doc ids, their passages, the note before it."""

    query: str
    doc_ids: tuple[str, ...] = ()
    passages: tuple[str, ...] = ()
    note: str = ""

    def to_json(self) -> dict:
        return {"query": self.query, "doc_ids": list(self.doc_ids), "note": self.note,
                "passages": list(self.passages)}

    @classmethod
    def from_json(cls, obj: dict) -> "Step":
        return cls(str(obj["query"]), tuple(str(d) for d in obj["doc_ids"]),
                   tuple(str(p) for p in obj.get("passages") or ()), str(obj.get("note") or ""))


@dataclass(frozen=True)
class QCP:
    """The steps of a question construction path and the document the examiner started from."""

    steps: tuple[Step, ...] = ()
    seed_doc_id: str | None = None

    def to_json(self) -> dict:
        """The `qcp` field of a tasks row."""
        return {"seed_doc_id": self.seed_doc_id, "hops": [s.to_json() for s in self.steps]}

    @classmethod
    def from_json(cls, obj: dict) -> "QCP":
        """A QCP from a tasks row's `qcp` field (a dict, or its JSON text)."""
        if isinstance(obj, str):
            obj = json.loads(obj)
        if not isinstance(obj, dict) or not isinstance(obj.get("hops"), list):
            raise ValueError("a qcp is an object with a list of hops")
        return cls(tuple(Step.from_json(h) for h in obj["hops"]), obj.get("seed_doc_id"))

    def queries(self) -> list[str]:
        return [s.query for s in self.steps]

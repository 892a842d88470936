"""The verdict one check gives about one record, and its `verdicts` row form.

Rule checks raise `Reject(reason, **detail)` and `run_steps` turns a list of named steps
into verdicts, stopping at the first failing one (an unexpected error becomes a
`check_crashed` reject: data is data, a record never crashes the run).

A verdict row's id is the hash of its key (record id, kind, layer, check): one verdict per
check and record in a run, so a rerun that redoes a check skips it instead of adding a
second (and the id costs ~1 us instead of hashing the row's JSON).

    Verdict("rules", "answer", False, "wrong_answer", score=0.4, detail={"em": False})
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

LAYERS = ("schema", "rules", "judge", "answerability", "dataset")
_DETAIL = json.JSONEncoder(ensure_ascii=False, sort_keys=True, default=str)  # what json.dumps builds per call


@dataclass
class Verdict:
    layer: str
    check: str
    passed: bool
    reason: str | None = None
    score: float | None = None
    detail: Any = field(default=None)

    @property
    def code(self) -> str | None:
        """The reason code a verdict row keeps: the reason, else "ok" for a pass."""
        return self.reason if self.reason else ("ok" if self.passed else None)

    def detail_text(self) -> str | None:
        """The detail as a verdict row keeps it: text as is, anything else as sorted JSON."""
        d = self.detail
        return d if d is None or isinstance(d, str) else _DETAIL.encode(d)

    def row(self, record_id: str, record_kind: str) -> dict:
        return {"id": verdict_id(record_id, record_kind, self.layer, self.check), "record_id": record_id,
                "record_kind": record_kind, "layer": self.layer, "check": self.check, "passed": bool(self.passed),
                "reason": self.code, "score": None if self.score is None else float(self.score),
                "detail": self.detail_text()}


def verdict_id(record_id: str, record_kind: str, layer: str, check: str) -> str:
    """A verdict row's id: the hash of (record id, kind, layer, check)."""
    key = f"{record_id}\x1f{record_kind}\x1f{layer}\x1f{check}"
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def verdict_ids(record_id: str, record_kind: str, verdicts: Sequence[Verdict]) -> list[str]:
    """`verdict_id` of each of one record's verdicts, hashing the record's part of the key
    once (the same digests: sha256 reads the key as a stream)."""
    head = hashlib.sha256(f"{record_id}\x1f{record_kind}\x1f".encode("utf-8", "surrogatepass"))
    out = []
    for v in verdicts:
        h = head.copy()
        h.update(f"{v.layer}\x1f{v.check}".encode("utf-8", "surrogatepass"))
        out.append(h.hexdigest()[:32])
    return out


def ok(layer: str, check: str, **kw) -> Verdict:
    return Verdict(layer, check, True, kw.pop("reason", "ok"), **kw)


def fail(layer: str, check: str, reason: str, **kw) -> Verdict:
    return Verdict(layer, check, False, reason, **kw)


class Reject(Exception):
    """Raised by a rule step: the record fails with `reason` (a code of validators.reasons)."""

    def __init__(self, reason: str, **detail):
        super().__init__(reason)
        self.reason, self.detail = reason, detail


def run_steps(layer: str, steps: Sequence[tuple[str, Callable[[], Verdict | None]]]) -> list[Verdict]:
    """Run named steps in order; a step returns None (passed), a Verdict, or raises Reject.
    Stops after the first failing verdict."""
    out: list[Verdict] = []
    for name, fn in steps:
        try:
            v = fn() or ok(layer, name)
        except Reject as r:
            v = fail(layer, name, r.reason, detail=r.detail or None)
        except Exception as e:  # data is data: never crash on a record
            v = fail(layer, name, "check_crashed", detail={"error": f"{type(e).__name__}: {e}"[:300]})
        out.append(v)
        if not v.passed:
            break
    return out

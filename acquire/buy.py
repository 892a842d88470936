"""Buying labels within the budget: reserve in the ledger (acquire/ledger.py), ask the source,
commit the labels shard, settle. A source that fails releases what it was asked for; a
crash between the commit and the settle is repaired by `Ledger.recover` with the shard's
prompt ids (`labelled_ids`), so ledger and shard agree and no label is paid for twice.

    source = ColumnSource({"p1": "Paris", "p2": "Rome"})          # acquire/sources.py
    counts = buy(ledger, source, ["p2", "p1"], RunWriter(root, "labels-1"), "demo", "care",
                 scores={"p2": 0.9, "p1": 0.4})

A source (acquire/sources.py) has a `name`, a `cost` per label and `buy(prompt_ids) ->
{prompt_id: label}`; a prompt it cannot label is left out of the result (released, nothing
spent; counted `queued` when the source hands it on to people, else `unlabelled`). Every
prompt is tried in order: one over the budget does not stop a later one that was paid
before (counted `already_paid`) from being reported.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json

from acquire.ledger import Ledger
from acquire.sources import ColumnSource

__all__ = ["ColumnSource", "buy", "label_id", "labelled_ids", "pseudo_rows"]


def label_id(dataset: str, prompt_id: str, kind: str = "bought") -> str:
    """A label row's id: one bought and one pseudo-label per (dataset, prompt)."""
    return hashlib.sha256(f"label|{dataset}|{prompt_id}|{kind}".encode()).hexdigest()[:24]


def pseudo_rows(dataset: str, groups, **meta) -> list[dict]:
    """The labels rows of `groups`' pseudo-labels (their votes; source pseudo, cost 0)."""
    return [{"id": label_id(dataset, g.prompt_id, "pseudo"), "prompt_id": g.prompt_id, "strategy": "pseudo",
             "label": g.vote.label, "score": g.vote.share, "source": "pseudo", "cost": 0.0,
             "meta": json.dumps({"sizes": list(g.vote.sizes), "n": g.n, **meta})} for g in groups]


def labelled_ids(root, dataset: str) -> set[str]:
    """Prompt ids of every bought label committed to `dataset`'s labels shard (any run)."""
    from storage import load_table

    try:
        t = load_table(dataset, "labels", root, columns=["prompt_id", "source"]).to_pylist()
    except FileNotFoundError:
        return set()
    return {r["prompt_id"] for r in t if r["source"] != "pseudo"}


def buy(ledger: Ledger, source, prompt_ids: list[str], writer, dataset: str, strategy: str,
        scores: dict[str, float] | None = None) -> dict:
    """Buy labels for `prompt_ids` in order while the budget lasts; counts of each outcome
    and the labels bought now (`labels`)."""
    counts = {"bought": 0, "already_paid": 0, "busy": 0, "over_budget": 0, "unlabelled": 0, "queued": 0}
    reserved = []
    for pid in prompt_ids:
        r = ledger.reserve(pid, source.cost, strategy)
        if r.status == "reserved":
            reserved.append(pid)
        else:
            counts[{"paid": "already_paid"}.get(r.status, r.status)] += 1
    if not reserved:
        return {**counts, "labels": {}}
    try:
        got = source.buy(reserved)
    except BaseException:
        for pid in reserved:
            ledger.release(pid)
        raise
    for pid in reserved:
        if pid not in got:
            ledger.release(pid)
            counts["queued" if source.defers else "unlabelled"] += 1
    now = dt.datetime.now(dt.timezone.utc)
    rows = [{"id": label_id(dataset, pid), "prompt_id": pid, "strategy": strategy, "label": got[pid],
             "score": (scores or {}).get(pid), "requested_at": now, "source": source.name, "cost": float(source.cost),
             "meta": json.dumps({"ledger": str(ledger.path), **source.notes(pid)})} for pid in reserved if pid in got]
    if rows:
        try:
            writer.commit(dataset, "labels", rows)  # whole shards: all of them or none
        except BaseException:
            for row in rows:
                ledger.release(row["prompt_id"])
            raise
    for row in rows:
        ledger.settle(row["prompt_id"], row["label"], row["cost"])
    counts["bought"] = len(rows)
    return {**counts, "labels": {r["prompt_id"]: r["label"] for r in rows}}

"""One record found by its id in a dataset, with the verdicts about it: what `forgeplay show`
prints.

A record is named by its row `id` (the content hash every kind has) or by its kind's own id
(`traj_id`, `task_id`, `rollout_id`, `triple_id`, `doc_id`, `tool_id`; a label by its
`prompt_id`, the latest row when a prompt has several). Every kind of the dataset is
searched through the catalog's views (committed shards only), verdicts aside unless asked
for; the verdicts are those of every dataset under the root that names the record
(validation writes them beside the records it read, so an accepted trajectory in
`demo_valid` has its verdicts in `demo`).

    found = find(root, "demo_valid", "3f2a9c0d...")
    found.kind, found.row["messages"], found.verdicts
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path

from storage import manifest
from storage.catalog import Catalog, view_name
from storage.funnel import LAYER_RANK

# each kind's own id column (besides the row id every kind has)
OWN_ID = {"documents": "doc_id", "triples": "triple_id", "tools": "tool_id", "trajectories": "traj_id",
          "tasks": "task_id", "rollouts": "rollout_id", "labels": "prompt_id", "verdicts": "record_id"}
VERDICT_COLUMNS = ("dataset", "run_id", "layer", "check", "passed", "reason", "score", "detail")


class NotFound(LookupError):
    """The dataset or the record is not there; the message is one line naming what is."""


@dataclass
class Found:
    dataset: str
    kind: str
    row: dict
    matches: int = 1  # rows that carry the id (labels of one prompt); `row` is the latest
    verdicts: list[dict] = field(default_factory=list)
    run_record: str | None = None  # <dataset>/_runs/<run_id>.json when the run saved one


def find(root, dataset: str, record_id: str, kind: str | None = None) -> Found:
    """The record `record_id` of `dataset` (of `kind` when given) and its verdicts; NotFound
    with a one-line message when the dataset, the kind or the id is not there."""
    root = manifest.resolve_root(root)
    known = manifest.datasets(root)
    if dataset not in known:
        raise NotFound(f"no dataset {dataset!r} under {root}; known: {', '.join(known) or 'none'}")
    with Catalog(root) as cat:
        kinds = [k for k in OWN_ID if view_name(dataset, k) in cat.views]
        if kind is not None:
            if kind not in kinds:
                raise NotFound(f"dataset {dataset!r} has no {kind} rows; it has: {', '.join(kinds) or 'nothing readable'}")
            kinds = [kind]
        else:
            kinds = [k for k in kinds if k != "verdicts"]
        for k in kinds:
            view, own = view_name(dataset, k), OWN_ID[k]
            rows = _dicts(cat, f'SELECT * FROM "{view}" WHERE id = ? OR "{own}" = ? ORDER BY created_at DESC',
                          [record_id, record_id])
            if rows:
                row = rows[0]
                return Found(dataset, k, row, len(rows), _verdicts(cat, row, own), _run_record(root, dataset, row))
    raise NotFound(f"no record {record_id!r} in dataset {dataset!r} (searched {', '.join(kinds)} by id and "
                   f"{', '.join(OWN_ID[k] for k in kinds)})")


def _dicts(cat: Catalog, query: str, params: list) -> list[dict]:
    def run(c: Catalog):
        rel = c.con.execute(query, params)
        cols = [d[0] for d in rel.description]
        return [dict(zip(cols, r)) for r in rel.fetchall()]

    return [{k: _plain(v) for k, v in r.items()} for r in cat.retrying(run)]


def _plain(v):
    """A DuckDB value as JSON has it (timestamps as ISO text)."""
    if isinstance(v, (datetime.datetime, datetime.date)):
        return v.isoformat()
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _verdicts(cat: Catalog, row: dict, own: str) -> list[dict]:
    """The verdicts that name the row (by its id or its own id), from every dataset, in
    layer order as validation wrote them."""
    ids = sorted({i for i in (row.get("id"), row.get(own)) if i})
    out = []
    for view in sorted(v for v in cat.views if v.endswith("_verdicts")):
        dataset = view[: -len("_verdicts")]
        marks = ", ".join("?" for _ in ids)
        out += [{"dataset": dataset, **r} for r in _dicts(
            cat, f'SELECT run_id, layer, "check", passed, reason, score, detail FROM "{view}" '
                 f"WHERE record_id IN ({marks}) ORDER BY run_id, {LAYER_RANK}", ids)]
    return out


def _run_record(root: Path, dataset: str, row: dict) -> str | None:
    path = manifest.dataset_dir(root, dataset) / "_runs" / f"{row.get('run_id')}.json"
    return str(path) if path.exists() else None

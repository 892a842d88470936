"""Where a dataset's rows came from, read from the manifest and the run records: per (kind,
run) of its committed shards, the run record that made them (`<root>/<dataset>/_runs/
<run_id>.json`, in this dataset or the one a flow keeps it in: validation keeps its record
beside the verdicts, in the input dataset) and the datasets that record's config names; the
loop runs (`<root>/runs/<run_id>/run.json`) that list the dataset; and a license when a record
names one. What a dataset card (storage/card.py) says about lineage.

    found = lineage("data", "demo_valid", entries)
    found.sources()        # ["demo"]
    found.runs[0]          # RunSource(kind="trajectories", run_id="validate-...", rows=60, sources=["demo"], ...)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from storage import loop_runs, manifest
from storage.runs import runs_dir

SOURCE_KEYS = ("dataset", "corpus", "data")  # config fields that name the dataset a run read


@dataclass
class RunSource:
    """The rows one run committed to one kind, and what the run read."""

    kind: str
    run_id: str
    rows: int
    sources: list[str]
    record: str | None  # the run record's path relative to the data root; None when there is none


@dataclass
class Lineage:
    runs: list[RunSource] = field(default_factory=list)
    loops: list[tuple[str, str]] = field(default_factory=list)  # (loop run id, the dataset's role in it)
    license: str | None = None

    def sources(self) -> list[str]:
        """Every dataset a run of this one read, sorted."""
        return sorted({s for r in self.runs for s in r.sources})


def _named(node, keys=SOURCE_KEYS):
    """String values of the fields named `keys` anywhere in a config (nested dicts and lists)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in keys and isinstance(v, str):
                yield v
            else:
                yield from _named(v, keys)
    elif isinstance(node, list):
        for v in node:
            yield from _named(v, keys)


def _find_record(root: Path, dataset: str, run_id: str, others: list[str]) -> tuple[Path, dict] | None:
    for ds in [dataset, *others]:
        path = runs_dir(root, ds) / f"{run_id}.json"
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict):
            return path, record
    return None


def lineage(root, dataset: str, entries: list[manifest.Entry]) -> Lineage:
    """The lineage of `dataset`'s committed `entries` (module docstring)."""
    root = manifest.resolve_root(root)
    known = manifest.datasets(root)
    others = [d for d in known if d != dataset]
    rows: dict[tuple[str, str], int] = {}
    for e in entries:
        rows[(e.kind, e.run_id)] = rows.get((e.kind, e.run_id), 0) + e.rows
    out, licenses = Lineage(), []
    for (kind, run_id), n in rows.items():
        found = _find_record(root, dataset, run_id, others)
        sources, rel = set(), None
        if found:
            path, record = found
            rel = str(path.relative_to(root))
            holder = path.parent.parent.name
            sources = {s for s in _named(record.get("config", {})) if s in known}
            sources |= {holder} if holder != dataset else set()
            licenses += list(_named(record, ("license",)))
        out.runs.append(RunSource(kind, run_id, n, sorted(sources - {dataset}), rel))
    for run_id, record in loop_runs.records(root):
        datasets = record.get("datasets") or {}
        out.loops += [(run_id, role) for role, name in sorted(datasets.items()) if name == dataset]
        if any(name == dataset for name in datasets.values()):
            licenses += list(_named(record.get("config", {}), ("license",)))
    out.license = licenses[0] if licenses else None
    return out

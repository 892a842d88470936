"""DuckDB catalog over committed shards, and `verify`.

`Catalog(root)` opens an in-memory DuckDB connection with one view per (dataset, kind),
named `<dataset>_<kind>` (non-identifier characters become `_`), over the shards the
manifest lists (`read_parquet(..., union_by_name=true)`, so schema versions mix). Shards
that are missing, have the wrong size, or were found corrupt by the last `verify` are left
out of the views and listed in `Catalog.problems`, so one bad file never breaks a query.
A dataset with verdicts also gets `<dataset>_funnel` (storage/funnel.py).

`verify(root)` recomputes every shard's sha256 against the manifest and reports missing,
truncated or corrupted shards by path; it records them in `<dataset>/_quarantine.json`
for the catalog to skip.

    cat = Catalog("data"); cat.sql("SELECT count(*) FROM demo_trajectories").fetchall()
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import duckdb

from storage import manifest
from storage.manifest import QUARANTINE, quarantined
from storage.files import write_text
from storage.funnel import funnel_sql


@dataclass(frozen=True)
class Problem:
    dataset: str
    kind: str
    path: str
    problem: str  # missing | size_mismatch | checksum_mismatch | quarantined


def view_name(dataset: str, kind: str) -> str:
    return re.sub(r"\W", "_", f"{dataset}_{kind}")


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


class Catalog:
    """DuckDB views over the committed shards under a data root."""

    def __init__(self, root=None, *, con: duckdb.DuckDBPyConnection | None = None):
        self.root = manifest.resolve_root(root)
        self.con = con or duckdb.connect(":memory:")
        self.views: dict[str, list[str]] = {}
        self.problems: list[Problem] = []
        self.refresh()

    def refresh(self) -> None:
        """Re-read the manifests and (re)create the views."""
        groups: dict[tuple[str, str], list[str]] = {}
        self.problems = []
        for ds in manifest.datasets(self.root):
            ddir = self.root / ds
            bad = quarantined(ddir)
            for e in manifest.read(ddir):
                path = e.abspath(ddir)
                problem = None
                if e.path in bad:
                    problem = "quarantined"
                elif not path.exists():
                    problem = "missing"
                elif path.stat().st_size != e.bytes:
                    problem = "size_mismatch"
                if problem:
                    self.problems.append(Problem(ds, e.kind, str(path), problem))
                else:
                    groups.setdefault((ds, e.kind), []).append(str(path))
        for name in list(self.views):
            self.con.execute(f'DROP VIEW IF EXISTS "{name}"')
        self.views = {}
        for (ds, kind), files in sorted(groups.items()):
            name = view_name(ds, kind)
            file_list = "[" + ", ".join(_sql_str(f) for f in files) + "]"
            self.con.execute(f'CREATE OR REPLACE VIEW "{name}" AS SELECT * FROM '
                             f"read_parquet({file_list}, union_by_name=true, hive_partitioning=false)")
            self.views[name] = files
            if kind == "verdicts":  # rows in, rejected per layer and reason, rows out
                funnel = view_name(ds, "funnel")
                self.con.execute(f'CREATE OR REPLACE VIEW "{funnel}" AS ' + funnel_sql(ds, view=name))
                self.views[funnel] = files

    def sql(self, query: str) -> duckdb.DuckDBPyRelation:
        """Run a query; raises a duckdb error with DuckDB's message on bad SQL."""
        return self.con.sql(query)

    def rows(self, query: str, params: list | None = None) -> list[tuple]:
        """Run a query and fetch all rows."""
        return self.con.execute(query, params or []).fetchall()

    def scalar(self, query: str, params: list | None = None):
        """Run a query and return the first column of its first row."""
        return self.con.execute(query, params or []).fetchone()[0]

    def funnel(self, dataset: str, run_id: str | None = None) -> list[dict]:
        """The funnel of `dataset`'s verdicts (storage/funnel.py), optionally of one run: one
        dict per row (layer, check, reason, rejected, rows_in, rows_out); [] without verdicts."""
        view = view_name(dataset, "verdicts")
        if view not in self.views:
            return []
        cols = ["layer", "check", "reason", "rejected", "rows_in", "rows_out"]
        return [dict(zip(cols, r[:6])) for r in self.rows(funnel_sql(dataset, run_id, view=view))]

    def passed_with(self, dataset: str, reasons, run_id: str | None = None) -> list[dict]:
        """Records whose verdict passed with one of `reasons` (e.g. a check that could not
        run), per layer, check and reason: dicts with layer, check, reason, records."""
        view = view_name(dataset, "verdicts")
        if view not in self.views or not reasons:
            return []
        marks = ", ".join("?" * len(reasons))
        where = f"passed AND reason IN ({marks})" + (" AND run_id = ?" if run_id else "")
        rows = self.rows(f'SELECT layer, "check", reason, count(DISTINCT record_id) FROM "{view}" WHERE {where} '
                         'GROUP BY ALL ORDER BY 4 DESC, 1, 2, 3', [*reasons, *([run_id] if run_id else [])])
        return [dict(zip(("layer", "check", "reason", "records"), r)) for r in rows]

    def close(self) -> None:
        """Close the connection and drop it: a Catalog object that outlives its use (a frame
        kept by a traceback) then holds no DuckDB object at interpreter exit."""
        if self.con is not None:
            self.con.close()
            self.con = None

    def __enter__(self) -> "Catalog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def verify(root=None, dataset: str | None = None, *, record: bool = True) -> tuple[int, list[Problem]]:
    """Recompute checksums of every committed shard. Returns (shards checked, problems).
    With `record`, corrupt shards are written to the dataset's quarantine list (and shards
    that check out again are removed from it)."""
    root = manifest.resolve_root(root)
    checked, problems = 0, []
    for ds in manifest.datasets(root):
        if dataset and ds != dataset:
            continue
        ddir = root / ds
        bad = []
        for e in manifest.read(ddir):
            checked += 1
            path = e.abspath(ddir)
            if not path.exists():
                problem = "missing"
            elif path.stat().st_size != e.bytes:
                problem = "size_mismatch"
            elif manifest.file_sha256(path) != e.sha256:
                problem = "checksum_mismatch"
            else:
                continue
            problems.append(Problem(ds, e.kind, str(path), problem))
            bad.append(e.path)
        if record and (bad or (ddir / QUARANTINE).exists()):
            write_text(ddir / QUARANTINE, json.dumps(sorted(bad)))
    return checked, problems


"""DuckDB catalog over committed shards, and `verify`.

`Catalog(root)` opens an in-memory DuckDB connection with one view per (dataset, kind),
named `<dataset>_<kind>` (non-identifier characters become `_`), over the shards the
manifest lists (`read_parquet([...])`; with `union_by_name=true` where schema versions mix,
which makes DuckDB open every file's footer whenever a query names the view, so a kind of
one version does without). Shards that are missing, have the wrong size, or were found
corrupt by the last `verify` are left out of the views and listed in `Catalog.problems`, so
one bad file never breaks a query. A dataset with verdicts also gets `<dataset>_funnel`
(storage/funnel.py). A query that finds a listed shard gone (a compaction replaced it,
storage/compact.py) makes `rows`, `scalar` and `retrying` read the manifests again and run
it once more; `sql` gives a lazy relation, which its caller runs inside `retrying`.

A catalog's queries use at most 512 MB of memory ($FORGEPLAY_DUCKDB_MEMORY, in DuckDB's
units: "2GB"); past it DuckDB spills to files in the system's temp folder. Its default is 80%
of the machine: the funnel of a 10^6-record validation (10^7 verdicts, a DISTINCT over them)
took 1.4 GB more, at the end of a run that holds its own state. DuckDB draws its progress bar
on a long query (past 2 s) on standard output, where it would be written into the results a
user redirects (`forgeplay sql ... --format csv > f.csv`): the bar is on only when standard
output is a terminal.

`verify(root)` recomputes every shard's sha256 (reading 4 MiB at a time) against the
manifest and reports missing, truncated or corrupted shards by path; it records them in
`<dataset>/_quarantine.json` for the catalog to skip. A shard gone because a compaction
replaced it meanwhile is not a problem: the dataset is checked again from its new manifest.

    cat = Catalog("data"); cat.sql("SELECT count(*) FROM demo_trajectories").fetchall()
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

import duckdb

from storage import manifest
from storage.manifest import QUARANTINE, quarantined
from storage.files import write_text
from storage.funnel import funnel_sql


RETRIES = 5  # runs of a query that found listed shards gone (compactions meanwhile)
MEMORY = "512MB"  # what a catalog's queries may hold before DuckDB spills to temp files
MEMORY_ENV = "FORGEPLAY_DUCKDB_MEMORY"
T = TypeVar("T")


@dataclass(frozen=True)
class Problem:
    dataset: str
    kind: str
    path: str
    problem: str  # missing | size_mismatch | checksum_mismatch | quarantined


def _gone(error: Exception) -> bool:
    """Whether a DuckDB error says a file it was told to read is not there."""
    return "No files found" in str(error) or "No such file" in str(error)


def _terminal() -> bool:
    """Whether standard output (the file descriptor DuckDB draws on) is a terminal."""
    return os.isatty(1)


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection whose queries hold at most $FORGEPLAY_DUCKDB_MEMORY
    (default MEMORY) and spill past it into a folder of its own in the system's temp folder
    (DuckDB makes it when it first spills and removes it when the connection closes); its
    progress bar only on a terminal (module docstring)."""
    limit = os.environ.get(MEMORY_ENV, "").strip() or MEMORY
    spill = os.path.join(tempfile.gettempdir(), f"forgeplay-duckdb-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        con = duckdb.connect(":memory:", config={"memory_limit": limit, "temp_directory": spill})
    except duckdb.Error as e:
        raise ValueError(f"${MEMORY_ENV} must be an amount of memory such as 512MB or 2GB, not {limit!r} "
                         f"({str(e).splitlines()[0]})") from None
    con.execute(f"SET enable_progress_bar_print = {str(_terminal()).lower()}")  # (a session setting)
    return con


def view_name(dataset: str, kind: str) -> str:
    return re.sub(r"\W", "_", f"{dataset}_{kind}")


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


class Catalog:
    """DuckDB views over the committed shards under a data root."""

    def __init__(self, root=None, *, con: duckdb.DuckDBPyConnection | None = None):
        self.root = manifest.resolve_root(root)
        self.con = con or connect()
        self.views: dict[str, list[str]] = {}
        self.problems: list[Problem] = []
        self.refresh()

    def _listing(self) -> tuple[dict[tuple[str, str], list[str]], dict[tuple[str, str], set[int]], list[Problem]]:
        """(files per (dataset, kind), their schema versions, problems) from the manifests; read
        again when a listed file is missing and the manifest changed meanwhile (a compaction)."""
        for _ in range(RETRIES):
            groups: dict[tuple[str, str], list[str]] = {}
            versions: dict[tuple[str, str], set[int]] = {}
            problems, read = [], {}
            for ds in manifest.datasets(self.root):
                ddir = self.root / ds
                bad = quarantined(ddir)
                read[ds] = manifest.read(ddir)
                for e in read[ds]:
                    path = e.abspath(ddir)
                    problem = None
                    if e.path in bad:
                        problem = "quarantined"
                    elif not path.exists():
                        problem = "missing"
                    elif path.stat().st_size != e.bytes:
                        problem = "size_mismatch"
                    if problem:
                        problems.append(Problem(ds, e.kind, str(path), problem))
                    else:
                        groups.setdefault((ds, e.kind), []).append(str(path))
                        versions.setdefault((ds, e.kind), set()).add(e.schema_version)
            if not any(p.problem == "missing" and manifest.read(self.root / p.dataset) != read[p.dataset]
                       for p in problems):
                break
        return groups, versions, problems

    def refresh(self) -> None:
        """Re-read the manifests and (re)create the views (DuckDB opens a file of each view
        to make it: again from the manifests when a compaction removed it meanwhile)."""
        for attempt in range(RETRIES):
            groups, versions, self.problems = self._listing()
            try:
                return self._make_views(groups, versions)
            except duckdb.IOException as e:
                if attempt == RETRIES - 1 or not _gone(e):
                    raise

    def _make_views(self, groups, versions) -> None:
        for name in list(self.views):
            self.con.execute(f'DROP VIEW IF EXISTS "{name}"')
        self.views = {}
        for (ds, kind), files in sorted(groups.items()):
            name = view_name(ds, kind)
            file_list = "[" + ", ".join(_sql_str(f) for f in files) + "]"
            by_name = "union_by_name=true, " if len(versions[(ds, kind)]) > 1 else ""
            self.con.execute(f'CREATE OR REPLACE VIEW "{name}" AS SELECT * FROM '
                             f"read_parquet({file_list}, {by_name}hive_partitioning=false)")
            self.views[name] = files
            if kind == "verdicts":  # rows in, rejected per layer and reason, rows out
                funnel = view_name(ds, "funnel")
                self.con.execute(f'CREATE OR REPLACE VIEW "{funnel}" AS ' + funnel_sql(ds, view=name))
                self.views[funnel] = files

    def sql(self, query: str) -> duckdb.DuckDBPyRelation:
        """Run a query; raises a duckdb error with DuckDB's message on bad SQL."""
        return self.con.sql(query)

    def retrying(self, run: Callable[["Catalog"], T]) -> T:
        """`run(self)`, run again on fresh views when it found a listed shard gone (a
        compaction replaced it after the views were made)."""
        for attempt in range(RETRIES):
            try:
                return run(self)
            except duckdb.IOException as e:
                if attempt == RETRIES - 1 or not _gone(e) or not self._changed():
                    raise
                self.refresh()
        raise AssertionError("unreachable")

    def _changed(self) -> bool:
        """Whether the manifests list other shards than the views were made from."""
        groups = self._listing()[0]
        return {view_name(ds, kind): files for (ds, kind), files in groups.items()} != \
            {name: files for name, files in self.views.items() if not name.endswith("_funnel")}

    def rows(self, query: str, params: list | None = None) -> list[tuple]:
        """Run a query and fetch all rows."""
        return self.retrying(lambda c: c.con.execute(query, params or []).fetchall())

    def scalar(self, query: str, params: list | None = None):
        """Run a query and return the first column of its first row."""
        return self.retrying(lambda c: c.con.execute(query, params or []).fetchone()[0])

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
        for _ in range(RETRIES):  # again when a compaction replaced shards while they were read
            entries = manifest.read(ddir)
            found = [p for p in (_check(ddir, ds, e) for e in entries) if p is not None]
            if not any(p.problem == "missing" for p in found) or manifest.read(ddir) == entries:
                break
        checked += len(entries)
        problems += found
        bad = [str(Path(p.path).relative_to(ddir)) for p in found]
        if record and (bad or (ddir / QUARANTINE).exists()):
            write_text(ddir / QUARANTINE, json.dumps(sorted(bad)))
    return checked, problems


def _check(ddir: Path, ds: str, e: manifest.Entry) -> Problem | None:
    path = e.abspath(ddir)
    try:
        if path.stat().st_size != e.bytes:
            problem = "size_mismatch"
        elif manifest.file_sha256(path) != e.sha256:
            problem = "checksum_mismatch"
        else:
            return None
    except FileNotFoundError:
        problem = "missing"
    return Problem(ds, e.kind, str(path), problem)

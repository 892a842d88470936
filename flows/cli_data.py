"""Dataset commands: `datasets`, `sql`, `inspect`, `verify`.

All read only committed shards through the manifest (storage.reader / storage.catalog);
`sql` imports DuckDB and the catalog alone (no pyarrow), so a query answers at once.
"""

from __future__ import annotations

import csv
import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import duckdb
import typer
from rich.console import Console
from rich.table import Table

from storage import manifest
from storage.catalog import Catalog, verify as verify_shards, view_name
from storage.configcli import DataRoot
from storage.manifest import resolve_root

console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


def _cell(v) -> str:
    if isinstance(v, (dict, list)):
        s = json.dumps(v, default=str, ensure_ascii=False)
    else:
        s = "" if v is None else str(v)
    return s if len(s) <= 80 else s[:77] + "..."


def print_table(columns: list[str], rows: list[tuple], title: str | None = None) -> None:
    t = Table(title=title, show_lines=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*(_cell(v) for v in r))
    console.print(t)


def emit(columns: list[str], rows: list[tuple], fmt: Format) -> None:
    if fmt == Format.csv:
        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows([[json.dumps(v, default=str) if isinstance(v, (dict, list)) else v for v in r] for r in rows])
    elif fmt == Format.json:
        for r in rows:
            sys.stdout.write(json.dumps(dict(zip(columns, r)), default=str, ensure_ascii=False) + "\n")
    else:
        print_table(columns, rows)


def datasets(data_root: DataRoot = None,
             format: Annotated[Format, typer.Option("--format", "-f", help="Output format on stdout.")] = Format.table) -> None:
    """List datasets, kinds and runs with shard and row counts (from the manifests)."""
    from storage import reader

    rows = reader.summary(resolve_root(data_root))
    if not rows:
        err.print(f"no datasets under {resolve_root(data_root)}")
        return
    cols = ["dataset", "kind", "run_id", "shards", "rows", "bytes", "schema_versions", "last_commit"]
    for r in rows:
        r["last_commit"] = r["last_commit"][:19].replace("T", " ")
    if format != Format.table:
        emit(cols, [tuple(r[c] for c in cols) for r in rows], format)
        return
    print_table(cols, [tuple(r[c] for c in cols) for r in rows], title=f"datasets in {resolve_root(data_root)}")


def sql(query: Annotated[str, typer.Argument(help="SQL for DuckDB; views are named <dataset>_<kind>.")],
        data_root: DataRoot = None,
        format: Annotated[Format, typer.Option("--format", "-f", help="Output format on stdout.")] = Format.table,
        out: Annotated[Optional[Path], typer.Option(help="Write the result to FILE.parquet, .csv or .json instead.")] = None,
        limit: Annotated[int, typer.Option(help="Rows printed at most (not applied to --out).")] = 1000) -> None:
    """Run SQL over the committed shards with DuckDB (which holds at most $FORGEPLAY_DUCKDB_MEMORY,
    default 512MB, and spills to temp files past it)."""
    if out is not None and out.suffix.lower().lstrip(".") not in ("parquet", "csv", "json"):
        err.print(f"[red]--out must end in .parquet, .csv or .json, not {out.name}[/red]")
        raise typer.Exit(2)

    def run(cat: Catalog):  # run again on fresh views if a compaction replaced shards meanwhile
        rel = cat.sql(query)
        if rel is None:  # a statement without a result
            return None
        if out is None:
            return rel.columns, rel.limit(limit).fetchall()
        opts = {"parquet": "FORMAT parquet", "csv": "FORMAT csv, HEADER", "json": "FORMAT json"}
        rel.create_view("__result", replace=True)
        cat.con.execute(f"COPY (SELECT * FROM __result) TO '{str(out).replace(chr(39), chr(39) * 2)}' "
                        f"({opts[out.suffix.lower().lstrip('.')]})")
        return cat.con.execute("SELECT count(*) FROM __result").fetchone()[0]

    with Catalog(resolve_root(data_root)) as cat:
        for p in cat.problems:
            err.print(f"[yellow]skipped {p.problem} shard[/yellow] {p.path}")
        try:
            result = cat.retrying(run)
        except duckdb.Error as e:
            err.print(f"[red]SQL error:[/red] {e}")
            if isinstance(e, duckdb.OutOfMemoryException):
                err.print("DuckDB may hold $FORGEPLAY_DUCKDB_MEMORY (default 512MB): set it higher, e.g. "
                          "FORGEPLAY_DUCKDB_MEMORY=4GB")
            if cat.views:
                err.print("views: " + ", ".join(sorted(cat.views)))
            raise typer.Exit(2)
        if result is None:
            return
        if out is not None:
            err.print(f"wrote {result} rows to {out}")
            return
        emit(*result, format)


def inspect(dataset: Annotated[str, typer.Argument(help="Dataset name.")],
            data_root: DataRoot = None,
            rows: Annotated[int, typer.Option("--rows", "-n", help="Sample rows shown per kind.")] = 3) -> None:
    """Show a dataset's kinds: schema, counts per run, and a few rows."""
    from storage import reader

    r = resolve_root(data_root)
    if dataset not in manifest.datasets(r):
        err.print(f"[red]no dataset {dataset!r} under {r}[/red]; known: {', '.join(manifest.datasets(r)) or 'none'}")
        raise typer.Exit(2)
    with Catalog(r) as cat:
        for kind in reader.kinds(r, dataset):
            view = view_name(dataset, kind)
            if view not in cat.views:
                err.print(f"[yellow]{kind}: no readable shard[/yellow]")
                continue
            console.rule(f"{dataset} / {kind}")
            desc = cat.sql(f'DESCRIBE "{view}"').fetchall()
            print_table(["column", "type"], [(d[0], d[1]) for d in desc], title="schema")
            counts = cat.sql(f'SELECT run_id, count(*) AS rows FROM "{view}" GROUP BY run_id ORDER BY run_id')
            print_table(counts.columns, counts.fetchall(), title="rows per run")
            sample = cat.sql(f'SELECT * FROM "{view}" LIMIT {int(rows)}')
            print_table(sample.columns, sample.fetchall(), title=f"first {rows} rows")


def verify(data_root: DataRoot = None,
           dataset: Annotated[Optional[str], typer.Argument(help="Only this dataset.")] = None) -> None:
    """Recompute shard checksums; report missing, truncated or corrupted shards by path.
    Bad shards are quarantined so queries skip them. Exit code 1 when any is found."""
    checked, problems = verify_shards(resolve_root(data_root), dataset)
    if problems:
        for p in problems:
            console.print(f"[red]{p.problem:<18}[/red] {p.dataset}/{p.kind}  {p.path}", soft_wrap=True)
        err.print(f"[red]{len(problems)} of {checked} shards are bad[/red] (left out of queries)")
        raise typer.Exit(1)
    console.print(f"{checked} shards ok")


def register(app: typer.Typer) -> None:
    app.command()(datasets)
    app.command()(sql)
    app.command()(inspect)
    app.command()(verify)

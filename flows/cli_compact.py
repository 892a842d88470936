"""`forgeplay compact DATASET`: rewrite a dataset's many small shards into few large ones
(storage/compact.py): the same rows, ids and order, new checksums in the manifest; readers
running meanwhile see the old shards or the new ones. Writers also compact their own run
once it holds more than $FORGEPLAY_COMPACT_SHARDS small shards (64 by default).

    forgeplay compact demo
    forgeplay compact demo --kind trajectories --run-id synth-1a2b --rows-per-shard 100000
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from storage.configcli import DataRoot, fail
from storage.manifest import resolve_root


def register(app: typer.Typer) -> None:
    @app.command("compact")
    def compact(dataset: Annotated[str, typer.Argument(help="The dataset (a folder of the data root).")],
                kind: Annotated[Optional[str], typer.Option(
                    "--kind", help="Only this record kind (default: every kind).")] = None,
                run_id: Annotated[Optional[str], typer.Option(
                    "--run-id", help="Only this run (default: every run).")] = None,
                rows_per_shard: Annotated[Optional[int], typer.Option(
                    "--rows-per-shard", min=1, help="Rows of a compacted shard at most (default: "
                    "storage.compact.ROWS_PER_SHARD, 250000).")] = None,
                data_root: DataRoot = None) -> None:
        """Merge the small shards of each run of a dataset, next to each other in commit order, into
        shards of at most --rows-per-shard rows, under the commit protocol (new files fsynced and
        renamed, the manifest swapped atomically, the old files removed). Quarantined shards stay as
        they are. Prints what it merged; `forgeplay verify` checks the result."""
        from tqdm.auto import tqdm

        from storage.compact import ROWS_PER_SHARD, planned, rewrite
        from storage.schema import KINDS

        if kind is not None and kind not in KINDS:
            fail(f"unknown record kind {kind!r}; known: {', '.join(KINDS)}")
        try:
            ddir, groups = planned(resolve_root(data_root), dataset, kind, run_id, rows_per_shard or ROWS_PER_SHARD)
        except (FileNotFoundError, ValueError) as e:
            fail(str(e))
        if not groups:
            typer.echo(f"{dataset}: nothing to compact")
            return
        with tqdm(total=sum(e.rows for g in groups for e in g), desc="compact", unit="row") as bar:
            result = rewrite(ddir, groups, progress=bar.update)
        for why in result.left:
            typer.echo(f"left as it was: {why}", err=True)
        typer.echo(f"{dataset}: {result.shards_in} shards ({result.rows} rows) rewritten as {result.shards_out}")

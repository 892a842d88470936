"""A run's writer that knows what the run committed, for flows that commit chunk by chunk
and resume after a kill: one ShardWriter per (dataset, kind) for the whole run (a writer per
chunk would re-read every committed id each time), each `commit` publishing its rows at once
as whole shards (a crash leaves no half shard) and skipping ids the run already committed
(a rerun writes only what is missing). `committed` reads one column of what the run
committed, e.g. to skip the records a killed run finished.

    w = RunWriter(root, "validate-1a2b3c", lineage={"config_hash": "1a2b3c"})
    done = set(w.committed("demo", "verdicts", "record_id").to_pylist())
    w.commit("demo_valid", "trajectories", table, parents=True)  # Arrow: content columns + id

Rows are an Arrow table of content columns and `id` (stamped here: storage.shards.stamp_table;
the writer checks types and nulls) or plain dicts (stamped and checked against the JSON
Schema by the ShardWriter, unless `trusted`: rows a validator already checked).
"""

from __future__ import annotations

import pyarrow as pa

from storage.reader import load_table
from storage.schema import load as load_schema
from storage.shards import ShardWriter, stamp, stamp_table


class RunWriter:
    """Commits the rows of one run to any (dataset, kind), chunk by chunk (see above)."""

    def __init__(self, root, run_id: str, lineage: dict | None = None):
        self.root, self.run_id = root, run_id
        self.lineage = {"model": None, "backend": None, "config_hash": None, "parent_ids": [], **(lineage or {})}
        self.open: dict[tuple[str, str], ShardWriter] = {}

    def committed(self, dataset: str, kind: str, column: str = "id") -> pa.Array:
        """`column` of every row this run committed to (dataset, kind)."""
        t = load_table(dataset, kind, self.root, run_id=self.run_id, columns=[column])
        return t.column(column).combine_chunks() if column in t.column_names else pa.array([], pa.string())

    def count(self, dataset: str, kind: str) -> int:
        """Rows this run committed to (dataset, kind), counted by the open writer when there
        is one (it knows every id committed before and since it opened)."""
        w = self.open.get((dataset, kind))
        return w.known_count() if w is not None else len(self.committed(dataset, kind))

    def commit(self, dataset: str, kind: str, rows: pa.Table | list[dict], *, parents: bool = False,
               trusted: bool = False) -> int:
        """Write `rows` and publish them now; returns the rows new to this run. `parents`:
        each row's lineage names the row itself (a row kept from its input); `trusted`:
        dict rows already fit the kind's JSON Schema, so only their types are checked."""
        schema = load_schema(kind)
        if isinstance(rows, pa.Table):
            rows = stamp_table(rows, schema, self.run_id, self.lineage, parents)
        else:
            if parents:
                rows = [{**r, "lineage": {**self.lineage, "parent_ids": [r["id"]]}} for r in rows]
            if trusted:
                rows = schema.table(stamp(rows, schema, self.run_id, self.lineage))
        key = (dataset, kind)
        if key not in self.open:
            self.open[key] = ShardWriter(self.root, dataset, kind, self.run_id, lineage=self.lineage)
        try:
            n = self.open[key].write(rows)
            self.open[key].close()
        except BaseException:  # the next commit starts a fresh writer, which re-reads what is committed
            self.open.pop(key, None)
            raise
        return n

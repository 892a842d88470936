"""The records of one chunk as the checks see them: their ids, and their values, either an
Arrow table (a dataset's committed rows: content fields and id) or Python values (a user's
file, where a line may be no JSON object at all: the schema layer rejects it).

A table-backed chunk turns into Python rows once, on first use (`values`); checks that can
work on Arrow (the schema layer's fast path) read `table`. The accepted records of a
table-backed chunk are taken from the table by index, never rebuilt from Python. A chunk
travels to a worker process as Arrow IPC: only its own rows, not the buffers of the table
it was sliced from (pickling a slice would copy those whole).

    recs = Records.of_table(table)                 # ids from the id column
    recs = Records.of_values([{...}, "not json"])  # ids: raw_id of each value
    recs.values; recs.take([0, 2]); recs.fields(("question", "answer")); recs.accepted([0])
"""

from __future__ import annotations

import gc
import hashlib
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

import pyarrow as pa

from storage.schema import SHARED_COLUMNS, record_id
from storage.userfiles import iter_records


def raw_id(raw) -> str:
    """Id of a record: its `id`, else the content hash; for non-objects a hash of the text."""
    if isinstance(raw, dict):
        rid = raw.get("id")
        if isinstance(rid, str) and rid:
            return rid
        try:
            return record_id(raw)
        except (TypeError, ValueError):
            pass
    return hashlib.sha256(repr(raw).encode()).hexdigest()[:32]


def read_input(path: str) -> list:
    """Records of a user file (storage/userfiles.py); what is not a record (a line that is
    not JSON, a JSON value that is not an object) stays as read, for the schema layer to reject."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"no such input file: {path}")
    return [r.record if r.record is not None else r.value if r.text is None else r.text for r in iter_records(p)]


_gc_lock = threading.Lock()
_gc_holders = [0, False]  # sections inside gc_paused, and whether the collector was on before the first


@contextmanager
def gc_paused():
    """No cyclic garbage collection inside: for bulk work on a chunk (turning it into Python
    objects, checking it), where every collection would walk the chunk's thousands of live
    dicts and lists again; that costs a third of the conversion and a tenth of the rule
    checks. What little cyclic garbage the block leaves is collected after it. Counted, so
    threads can nest it; the collector's state is restored when the last one leaves."""
    with _gc_lock:
        if _gc_holders[0] == 0:
            _gc_holders[1] = gc.isenabled()
            gc.disable()
        _gc_holders[0] += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holders[0] -= 1
            if _gc_holders[0] == 0 and _gc_holders[1]:
                gc.enable()


def _from_ipc(ids: list[str], data: pa.Buffer) -> "Records":
    return Records(ids, table=pa.ipc.open_stream(data).read_all())


class Records:
    """Ids and values of a chunk's records (see the module docstring)."""

    __slots__ = ("ids", "table", "_values")

    def __init__(self, ids: list[str], table: pa.Table | None = None, values: list | None = None):
        if table is None and values is None:
            raise ValueError("Records need a table or values")
        self.ids, self.table, self._values = ids, table, values

    @classmethod
    def of_table(cls, table: pa.Table) -> "Records":
        """Rows of a dataset (content columns and `id`); a row with an empty id gets its
        content hash, as `raw_id` gives it."""
        ids = table.column("id").to_pylist()
        for i, rid in enumerate(ids):
            if not rid:
                ids[i] = raw_id(table.slice(i, 1).to_pylist()[0])
        return cls(ids, table=table)

    @classmethod
    def of_values(cls, values: list) -> "Records":
        return cls([raw_id(v) for v in values], values=values)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def values(self) -> list:
        """The records as Python values (rows of a table: dicts, converted once)."""
        if self._values is None:
            with gc_paused():
                self._values = self.table.to_pylist()
        return self._values

    def release(self) -> None:
        """Drop the Python values when the table can give them again: freed now by their
        reference counts, they are never walked by a garbage collection (which would visit
        every dict of the chunk once it survived into an older generation)."""
        if self.table is not None:
            self._values = None

    def is_object(self, i: int) -> bool:
        return self.table is not None or isinstance(self._values[i], dict)

    def take(self, positions: Sequence[int]) -> "Records":
        """The records at `positions`, in that order (the same object when that is all)."""
        if len(positions) == len(self) and all(p == i for i, p in enumerate(positions)):
            return self
        table = self.table.take(pa.array(positions, pa.int64())) if self.table is not None else None
        values = [self._values[p] for p in positions] if self._values is not None else None
        return Records([self.ids[p] for p in positions], table, values)

    def fields(self, names: Sequence[str] | None) -> list:
        """The values with at least the fields `names` (None: all); a table not yet
        converted gives only those columns, which is cheaper."""
        if names is None or self._values is not None or self.table is None:
            return self.values
        return self.table.select([n for n in names if n in self.table.column_names]).to_pylist()

    def accepted(self, positions: Sequence[int]) -> pa.Table | list[dict]:
        """The records at `positions` as accepted rows: content fields and their id. Taken
        from the table by index when there is one, else dicts without shared columns."""
        if self.table is None:
            return [{**{k: v for k, v in self._values[p].items() if k not in SHARED_COLUMNS}, "id": self.ids[p]}
                    for p in positions]
        t = self.take(positions).table
        content = [c for c in t.column_names if c not in SHARED_COLUMNS]
        return t.select(content).append_column("id", pa.array([self.ids[p] for p in positions], pa.string()))

    def __reduce__(self):
        if self.table is None:
            return Records, (self.ids, None, self._values)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.table.schema) as w:
            w.write_table(self.table)
        return _from_ipc, (self.ids, sink.getvalue())

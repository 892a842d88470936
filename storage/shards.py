"""Atomic Parquet shard writer.

Rows go to `<root>/<dataset>/<kind>/run=<run_id>/part-<n>.parquet` by commit only: validate
every row (a bad row raises `RowError` naming the row and field, and nothing is written),
write row groups to a hidden temp file, fsync, `os.replace` it into place under the dataset
lock, fsync the directory, then append the manifest entry. Rows written a few at a time
stream into the temp file of their shard, a row group (or 64 MB) at a time
(storage/temp_shard.py): a writer holds at most that, not a shard's rows (250,000
trajectories with their offered tools are ~4.5 GB in Arrow). A writer killed at any point
leaves only whole, committed shards visible. Rows whose `id` is already committed in the
same (dataset, kind, run) are skipped, so rerunning a run writes only what is missing. A
commit costs the same whatever the number of shards before it: the writers of a process
share what their run committed (storage/runstate.py) and read only the manifest lines
appended since. After a commit that leaves the run with more than 64 small shards
($FORGEPLAY_COMPACT_SHARDS) the writer compacts the run (storage/compact.py).

    with ShardWriter(root, "demo", "documents", run_id="r1") as w:
        w.write([{"doc_id": "d1", "title": "T", "text": "...", "source": "me"}])
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from storage import compact, manifest
from storage.files import fsync_dir
from storage.runstate import RunState
from storage.schema import KindSchema, RowError, load, record_id
from storage.temp_shard import TempShard

DEFAULT_ROWS_PER_SHARD = 250_000
DEFAULT_ROW_GROUP = 50_000


def stamp(rows: Iterable[dict], schema: KindSchema, run_id: str, lineage: dict | None = None) -> list[dict]:
    """Fill the shared columns of plain rows: id (content hash) unless given, run_id,
    created_at, schema_version and lineage."""
    now = dt.datetime.now(dt.timezone.utc)
    base = {"model": None, "backend": None, "config_hash": None, "parent_ids": []}
    base.update(lineage or {})
    out = []
    for row in rows:
        if not isinstance(row, dict):
            out.append(row)  # validate_rows reports it
            continue
        r = dict(row)
        if "id" not in r:  # not setdefault: that would hash every row, also when the id is given
            r["id"] = record_id(row)
        r["run_id"] = run_id
        r.setdefault("created_at", now)
        r["schema_version"] = schema.version
        r.setdefault("lineage", dict(base))
        out.append(r)
    return out


def stamp_table(table: pa.Table, schema: KindSchema, run_id: str, lineage: dict | None = None,
                parents: bool = False) -> pa.Table:
    """`stamp` for an Arrow table of content columns and `id`: adds run_id, created_at (now),
    schema_version and lineage (with `parents`, each row's parent_ids is [its id]), in the
    schema's column order and types (columns the schema lacks are left out, as
    `Table.from_pylist` leaves out keys)."""
    n = table.num_rows
    base = {"model": None, "backend": None, "config_hash": None, "parent_ids": []}
    base.update(lineage or {})
    ltype = schema.arrow.field("lineage").type
    if parents:
        fields = [pa.repeat(pa.scalar(base[f.name], f.type), n) for f in ltype if f.name != "parent_ids"]
        ids = table.column("id").combine_chunks().cast(pa.string())
        fields.append(pa.ListArray.from_arrays(pa.array(range(n + 1), pa.int32()), ids))
        lineage_col = pa.StructArray.from_arrays(fields, fields=list(ltype))
    else:
        lineage_col = pa.repeat(pa.scalar(base, ltype), n)
    now = dt.datetime.now(dt.timezone.utc)
    shared = {"run_id": pa.repeat(pa.scalar(run_id, pa.string()), n), "lineage": lineage_col,
              "created_at": pa.repeat(pa.scalar(now, schema.arrow.field("created_at").type), n),
              "schema_version": pa.repeat(pa.scalar(schema.version, pa.int32()), n)}
    names = set(table.column_names)
    cols = [shared[f.name] if f.name in shared else table.column(f.name).cast(f.type) if f.name in names
            else pa.nulls(n, f.type) for f in schema.arrow]
    return pa.Table.from_arrays(cols, schema=schema.arrow)


def committed_ids(root: Path, dataset: str, kind: str, run_id: str) -> pa.Array:
    """Ids already committed for (dataset, kind, run)."""
    state = RunState.of(manifest.dataset_dir(manifest.resolve_root(root), dataset), kind, run_id)
    with state.lock:
        return state.ids()


class ShardWriter:
    """Buffers rows of one (dataset, kind, run) and commits them as whole shards."""

    def __init__(self, root: str | os.PathLike | None, dataset: str, kind: str, run_id: str, *,
                 schema: KindSchema | None = None, lineage: dict | None = None,
                 rows_per_shard: int = DEFAULT_ROWS_PER_SHARD, row_group_size: int = DEFAULT_ROW_GROUP):
        self.root = manifest.resolve_root(root)
        self.dataset = manifest.check_name("dataset name", dataset)
        self.kind = kind
        self.run_id = manifest.check_name("run id", run_id)
        self.schema = schema or load(kind)
        self.lineage = lineage
        self.rows_per_shard = rows_per_shard
        self.row_group_size = row_group_size
        self.ddir = manifest.dataset_dir(self.root, dataset)
        self.rel_run = f"{kind}/run={run_id}"
        self.run_dir = self.ddir / self.rel_run
        compact.auto_limit()  # a bad $FORGEPLAY_COMPACT_SHARDS is reported before anything is written
        self.state = RunState.of(self.ddir, kind, run_id)  # committed ids, shared by this process's writers
        self._open: TempShard | None = None  # the shard being written: every row not committed
        self._open_ids: list[pa.Array] = []  # the ids of its rows
        self._buffer_set: set[str] | None = None  # ids of the buffered rows, once a check needs a set
        self.committed: list[manifest.Entry] = []
        self.skipped = 0

    # -- input -------------------------------------------------------------------------
    def write(self, rows: Sequence[dict] | pa.Table) -> int:
        """Validate and buffer rows (dicts or an Arrow table); commit full shards.
        Returns the number of new rows accepted (already-committed ids are skipped)."""
        table = self._table(rows)
        if table.num_rows >= max(10_000, self.rows_per_shard) and self._open is None:
            done = self._write_large(table)
            if done is not None:
                return done
        with self.state.lock:
            table = self._drop_seen(table)
        n = table.num_rows
        self._add(table)
        return n

    def known_ids(self) -> pa.Array:
        """Ids committed for this (dataset, kind, run) or written by this writer so far."""
        with self.state.lock:
            return self._known_array()

    def known_count(self) -> int:
        """How many ids `known_ids` holds, without reading them (a buffered row's id is never
        a committed one's)."""
        with self.state.lock:
            return self.state.count() + self._buffered

    def close(self) -> list[manifest.Entry]:
        """Commit what is buffered; returns every entry this writer committed."""
        if self._open is not None:
            self._flush()
        return self.committed

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:  # nothing half-done becomes visible; buffered ids may be written again
            if self._open is not None:
                self._open.discard()
            self._drop()

    # -- internals -----------------------------------------------------------------------
    @property
    def _buffered(self) -> int:
        """Rows not committed (all in the open shard)."""
        return self._open.rows if self._open is not None else 0

    def _drop(self) -> None:
        """Forget every row not committed (after an error: a rerun writes them)."""
        self._open, self._open_ids, self._buffer_set = None, [], None

    def _table(self, rows: Sequence[dict] | pa.Table) -> pa.Table:
        if isinstance(rows, pa.Table):
            return self._check_table(rows)
        rows = stamp(rows, self.schema, self.run_id, self.lineage)
        self.schema.validate_rows(rows)
        return self.schema.table(rows)

    def _check_table(self, table: pa.Table) -> pa.Table:
        """Arrow input: columns must cast to the kind's schema; required fields non-null."""
        names = set(table.column_names)
        target = self.schema.arrow
        for f in target:
            if f.name not in names:
                if not f.nullable:
                    raise RowError(self.kind, 0, f.name, "required column is missing")
                table = table.append_column(f.name, pa.nulls(table.num_rows, f.type))
        extra = names - set(target.names)
        if extra:
            raise RowError(self.kind, 0, sorted(extra)[0], "column is not in the schema")
        table = table.select(target.names)
        for f in target:
            col = table.column(f.name)
            if not f.nullable and col.null_count:
                row = pc.index(pc.is_null(col), True).as_py()
                raise RowError(self.kind, row, f.name, "required value is null")
        if table.schema != target:
            try:
                table = table.cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError) as e:
                raise RowError(self.kind, 0, "<table>", f"cannot cast to the {self.kind} schema: {e}") from e
        bad = pc.not_equal(table.column("schema_version"), self.schema.version)
        if pc.any(bad).as_py():
            raise RowError(self.kind, pc.index(bad, True).as_py(), "schema_version",
                           f"must be {self.schema.version}")
        return table

    def _drop_seen(self, table: pa.Table) -> pa.Table:
        """Drop rows whose id is committed or already buffered, and repeats inside the batch
        (caller holds the state's lock). A large batch against few known ids is checked in
        Arrow (C++ hash tables); else the ids are checked against the committed ones hashed
        (storage/hashed_ids.py) and a Python set of the buffered ones, built once and kept up
        to date (a writer used chunk by chunk would otherwise hash every known id per
        chunk)."""
        ids = table.column("id").combine_chunks()
        if table.num_rows >= 10_000 and not self.state.has_hashes() and \
                self.state.count() + self._buffered <= table.num_rows and \
                pc.count_distinct(ids).as_py() == table.num_rows:
            known = self._known_array()
            keep = pc.invert(pc.is_in(ids, value_set=known)) if len(known) else None
            if keep is not None and not pc.all(keep).as_py():
                self.skipped += table.num_rows - pc.sum(keep).as_py()
                table, ids = table.filter(keep), ids.filter(keep)
            if self._buffer_set is not None:
                self._buffer_set.update(ids.to_pylist())
            return table
        id_list = ids.to_pylist()
        committed, buffered = self.state.hashed().committed(id_list), self._buffered_set()
        if not committed and buffered.isdisjoint(id_list) and len(set(id_list)) == len(id_list):
            buffered.update(id_list)  # the usual case: all new
            return table
        keep = []
        for i in id_list:
            fresh = i not in committed and i not in buffered
            keep.append(fresh)
            if fresh:
                buffered.add(i)
        if not all(keep):
            self.skipped += len(keep) - sum(keep)
            table = table.filter(pa.array(keep))
        return table

    def _buffered_set(self) -> set[str]:
        if self._buffer_set is None:
            self._buffer_set = {i for a in self._open_ids for i in a.to_pylist()}
        return self._buffer_set

    def _known_array(self) -> pa.Array:
        arrays = [a for a in [self.state.ids(), *self._open_ids] if len(a)]
        if not arrays:
            return pa.array([], pa.string())
        return pa.concat_arrays(arrays) if len(arrays) > 1 else arrays[0]

    def _add(self, table: pa.Table) -> None:
        """Rows to the open shard (one is opened when none is); each shard that fills up is committed."""
        while table.num_rows:
            if self._open is None:
                self._open = TempShard(self.run_dir, table.schema, self.row_group_size)
            room = self.rows_per_shard - self._open.rows
            part, table = table.slice(0, room), table.slice(room)
            with self._disk_full(part.num_rows, self._open):
                self._open.add(part)
            self._open_ids.append(part.column("id").combine_chunks())
            if self._open.rows >= self.rows_per_shard:
                self._flush()

    def _flush(self) -> None:
        """Commit the open shard."""
        shard, ids = self._open, self._open_ids
        ids = pa.concat_arrays(ids) if len(ids) > 1 else ids[0]
        with self._disk_full(shard.rows, shard):
            written = shard.finish()
        self._open, self._open_ids = None, []
        if self._buffer_set is not None:
            self._buffer_set.difference_update(ids.to_pylist())
        self._publish(*written, ids)

    def _write_large(self, table: pa.Table) -> int | None:
        """Bulk path: check ids in a thread while the full shards are written to temp files;
        publish them if every id is new, else discard them and return None (the caller
        then filters row by row)."""
        ids = table.column("id").combine_chunks()
        full = table.num_rows - table.num_rows % self.rows_per_shard
        tmps: list[tuple] = []
        with ThreadPoolExecutor(1) as pool:
            fresh = pool.submit(self._all_fresh, ids)
            try:
                for start in range(0, full, self.rows_per_shard):  # written, not yet visible
                    tmps.append(self._write_tmp(table.slice(start, self.rows_per_shard)))
                ok = fresh.result()
            except BaseException:
                for t in tmps:
                    t[0].unlink(missing_ok=True)
                raise
        if not ok:
            for t in tmps:
                t[0].unlink(missing_ok=True)
            return None
        for k, t in enumerate(tmps):
            self._publish(*t, ids.slice(k * self.rows_per_shard, self.rows_per_shard))
        rest = table.slice(full)
        if rest.num_rows:
            self._add(rest)
            if self._buffer_set is not None:
                self._buffer_set.update(rest.column("id").to_pylist())
        return table.num_rows

    def _all_fresh(self, ids: pa.Array) -> bool:
        """No repeat inside `ids` and none already committed or buffered."""
        if pc.count_distinct(ids).as_py() != len(ids):
            return False
        with self.state.lock:
            known = self._known_array()
        return not len(known) or not pc.any(pc.is_in(ids, value_set=known)).as_py()

    def _write_tmp(self, table: pa.Table) -> tuple[Path, int, str, int]:
        """Write a hidden temp file of `table` alone and fsync it; returns (path, bytes, sha256, rows)."""
        shard = TempShard(self.run_dir, table.schema, self.row_group_size)
        with self._disk_full(table.num_rows, shard):
            shard.add(table)
            return shard.finish()

    @contextlib.contextmanager
    def _disk_full(self, rows: int, shard: TempShard):
        """On any error the temp file goes; a full disk becomes DiskFull, saying what to do."""
        try:
            yield
        except BaseException as e:
            shard.discard()
            if self._open is shard:  # what was not committed is dropped (a rerun writes it)
                self._drop()
            if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(errno.ENOSPC, f"no space left on the disk of {self.ddir} while committing "
                               f"{rows} {self.kind} rows of {self.dataset}: nothing of this shard was "
                               f"kept and the committed shards are intact; free space and rerun (committed work "
                               f"is skipped)") from e
            raise

    def _publish(self, tmp: Path, size: int, digest: str, rows: int, ids: pa.Array) -> None:
        """Rename a written temp file into place and append its manifest entry, under the lock;
        then compact the run when it holds too many small shards (storage/compact.py)."""
        with self.state.lock:
            try:
                with manifest.locked(self.ddir):
                    self.state.sync()  # what other writers committed since: their part numbers
                    final = self.run_dir / f"part-{self.state.next_part():05d}.parquet"
                    os.replace(tmp, final)
                    fsync_dir(self.run_dir)
                    entry = manifest.Entry(kind=self.kind, run_id=self.run_id, path=f"{self.rel_run}/{final.name}",
                                           rows=rows, bytes=size, sha256=digest, schema_version=self.schema.version,
                                           committed_at=dt.datetime.now(dt.timezone.utc).isoformat())
                    manifest.append(self.ddir, entry)
                    self.state.sync(own={entry.path: ids})
            finally:
                tmp.unlink(missing_ok=True)
        self.committed.append(entry)
        compact.after_commit(self.state)


class DiskFull(OSError):
    """The disk filled up while a shard was written; nothing of it was kept (the message says
    what to do)."""

    def __str__(self) -> str:
        return self.strerror


def write_rows(root, dataset: str, kind: str, run_id: str, rows, **kw) -> list[manifest.Entry]:
    """Write rows (dicts or an Arrow table) of one kind in one call; returns committed entries."""
    with ShardWriter(root, dataset, kind, run_id, **kw) as w:
        w.write(rows)
    return w.committed

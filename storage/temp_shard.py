"""A shard being written: a hidden temp file (`.part-<hex>.parquet.tmp`) in a run's folder that
rows stream into until it is finished (footer, fsync, checksum) and its writer renames it into
place, or discarded. Rows wait in memory until they fill a row group or hold BUFFER_BYTES,
then go to the file, so a shard being written costs at most that much memory (a trajectory
with its offered tools is ~19 KB in Arrow). The shard writer (storage/shards.py) and
compaction (storage/compact.py) write through it.

    shard = TempShard(run_dir, table.schema, row_group_size=50_000)
    shard.add(table)                     # ... as often as needed
    path, size, sha256, rows = shard.finish()   # or shard.discard()
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from storage import manifest

BUFFER_BYTES = 64 << 20  # a row group is written early when its rows reach this size in memory


class TempShard:
    """One hidden temp file, open for rows (module docstring)."""

    def __init__(self, folder: Path, schema: pa.Schema, row_group_size: int):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f".part-{uuid.uuid4().hex}.parquet.tmp"
        self.schema, self.row_group_size = schema, row_group_size
        self.rows = 0  # rows added: in the file and in memory
        self.held = self.held_bytes = 0  # rows (and their bytes) in memory, not in the file yet
        self._buffer: list[pa.Table] = []
        self._file = open(self.path, "wb")
        self._writer = pq.ParquetWriter(self._file, schema, compression="zstd")

    def add(self, table: pa.Table) -> None:
        """Add rows; whole row groups (or all that is held, past BUFFER_BYTES) go to the file."""
        self._buffer.append(table)
        self.rows, self.held, self.held_bytes = self.rows + table.num_rows, self.held + table.num_rows, \
            self.held_bytes + table.nbytes
        if self.held >= self.row_group_size or self.held_bytes >= BUFFER_BYTES:
            self._write(self.held - self.held % self.row_group_size or self.held)

    def _write(self, n: int) -> None:
        """The first `n` held rows to the file."""
        table = pa.concat_tables(self._buffer)
        rest = table.slice(n)
        self._buffer = [rest] if rest.num_rows else []
        self.held, self.held_bytes = rest.num_rows, rest.nbytes if rest.num_rows else 0
        self._writer.write_table(table.slice(0, n), row_group_size=self.row_group_size)

    def finish(self) -> tuple[Path, int, str, int]:
        """Write what is held, the footer, and fsync: (path, bytes, sha256, rows)."""
        if self.held:
            self._write(self.held)
        self._writer.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        return self.path, self.path.stat().st_size, manifest.file_sha256(self.path), self.rows

    def discard(self) -> None:
        """Close what is open and remove the file."""
        for close in (self._writer.close, self._file.close):
            with contextlib.suppress(Exception):
                close()
        self._buffer = []
        self.path.unlink(missing_ok=True)

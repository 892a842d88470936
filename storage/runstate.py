"""What one (dataset, kind, run) has committed, kept in step with the manifest at a cost that
does not grow with the number of shards: the run's manifest entries, the ids of its rows
(a writer skips them) and the highest part number it used.

`RunState.of(dataset_dir, kind, run_id)` gives this process's state of a run, shared by its
writers (storage/shards.py): the first one reads the ids from the run's shards; later ones
(a flow that opens a writer per chunk) and every commit read only the manifest lines
appended since (manifest.Tail) and the ids of the shards those lines name. When the run's
entries changed otherwise (another process compacted them, storage/compact.py) the ids are
read again; a compaction in this process updates the state in place (`adopt`). The states
of the few runs used last are kept (`KEEP`); a forked child starts with none.

    state = RunState.of(ddir, "trajectories", "r1")
    with state.lock, manifest.locked(ddir):
        state.sync()                   # lines appended by other writers since
        n = state.next_part()          # the part number of the next shard
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from storage import manifest
from storage.hashed_ids import HashedIds

KEEP = 8  # run states kept per process after their writers are done (each holds a run's ids)
_STATES: OrderedDict[tuple[str, str, str], "RunState"] = OrderedDict()
_STATES_LOCK = threading.Lock()


def _forget_all() -> None:
    _STATES.clear()


os.register_at_fork(after_in_child=_forget_all)  # a lock held by another thread must not be inherited


def part_number(name: str) -> int | None:
    """The number of a shard file name (`part-00012.parquet`, or a compacted
    `part-00012-<hex>.parquet`), None for any other name."""
    m = manifest.PART_RE.match(name)
    return int(m.group(1)) if m else None


class RunState:
    """The committed entries, ids and part numbers of one (dataset, kind, run); see above.
    Callers hold `lock` while they use it."""

    def __init__(self, ddir: Path, kind: str, run_id: str):
        self.ddir, self.kind, self.run_id = Path(ddir), kind, run_id
        self.rel_run = f"{kind}/run={run_id}"
        self.run_dir = self.ddir / self.rel_run
        self.lock = threading.RLock()
        self.tail = manifest.Tail(self.ddir)
        self.entries: list[manifest.Entry] = []
        self.max_part = -1
        self._arrays: list[pa.Array] = []
        self._hashes: HashedIds | None = None
        self.compact_above = 0  # small shards past which a writer compacts next (storage/compact.py)

    @classmethod
    def of(cls, ddir: Path, kind: str, run_id: str) -> "RunState":
        """This process's state of the run, in step with the manifest."""
        key = (str(Path(ddir).absolute()), kind, run_id)
        with _STATES_LOCK:
            state = _STATES.pop(key, None) or cls(Path(ddir), kind, run_id)
            _STATES[key] = state
            while len(_STATES) > KEEP:
                _STATES.popitem(last=False)
        with state.lock:
            state.sync()
        return state

    # -- keeping in step -----------------------------------------------------------------
    def sync(self, own: dict[str, pa.Array] | None = None) -> None:
        """Read the manifest lines written since the last sync and the ids of this run's new
        shards (`own`: ids of shards the caller just committed, not read back from disk).
        A shard that vanished while its ids were read (a compaction elsewhere) makes it
        read the whole manifest again."""
        for attempt in range(5):
            new, whole = self.tail.read()
            mine = [e for e in new if e.kind == self.kind and e.run_id == self.run_id]
            try:
                if whole and mine[:len(self.entries)] != self.entries:  # this run's shards changed
                    self.entries, self._arrays, self._hashes = [], [], None  # under us: read its ids again
                if whole:  # (the first sync, or the manifest was swapped: mostly other runs' shards)
                    mine = mine[len(self.entries):]
                    self._scan_disk()
                self._add(mine, own or {})
                return
            except FileNotFoundError:
                self.tail = manifest.Tail(self.ddir)
                self.entries, self._arrays, self._hashes = [], [], None
                if attempt == 4:
                    raise

    def _add(self, entries: list[manifest.Entry], own: dict[str, pa.Array]) -> None:
        for e in entries:
            ids = own.get(e.path)
            if ids is None:
                ids = pq.read_table(e.abspath(self.ddir), columns=["id"]).column("id").combine_chunks()
            ids = ids.cast(pa.string())
            if self._hashes is not None:
                self._hashes.update(ids.to_pylist())
            else:
                self._arrays.append(ids)
            self.entries.append(e)
            self.max_part = max(self.max_part, part_number(e.path.rsplit("/", 1)[1]) or -1)

    def _scan_disk(self) -> None:
        """Part numbers of files on disk that no entry names (a killed writer's)."""
        if self.run_dir.is_dir():
            for p in self.run_dir.iterdir():
                self.max_part = max(self.max_part, part_number(p.name) or -1)

    def adopt(self, entries: list[manifest.Entry], data: bytes) -> None:
        """Take the manifest this process just swapped in (`entries`, written as `data`) after
        compacting this run: same ids, other shards."""
        self.tail.seen(data)
        self.entries = [e for e in entries if e.kind == self.kind and e.run_id == self.run_id]
        for e in self.entries:
            self.max_part = max(self.max_part, part_number(e.path.rsplit("/", 1)[1]) or -1)

    # -- what a writer asks ------------------------------------------------------------
    def next_part(self) -> int:
        """The next free part number of the run folder (caller holds the dataset lock)."""
        n = self.max_part + 1
        while (self.run_dir / f"part-{n:05d}.parquet").exists():
            n += 1
        self.max_part = n
        return n

    def ids(self) -> pa.Array:
        """Ids of every committed row of the run (in no particular order)."""
        if self._hashes is not None:
            arrays = list(self._disk_ids())
        else:
            arrays = self._arrays = [a for a in self._arrays if len(a)]
        if len(arrays) > 1:
            arrays = [pa.concat_arrays(arrays)]
            if self._hashes is None:
                self._arrays = arrays
        return arrays[0] if arrays else pa.array([], pa.string())

    def _disk_ids(self):
        """The ids of each of the run's shards, read from disk."""
        for e in list(self.entries):
            yield pq.read_table(e.abspath(self.ddir), columns=["id"]).column("id").combine_chunks().cast(pa.string())

    def hashed(self) -> HashedIds:
        """The same ids hashed (storage/hashed_ids.py), built once (the arrays are then let
        go) and kept up to date: what a writer checks chunk by chunk, at 8 bytes an id."""
        if self._hashes is None:
            self._hashes = HashedIds(self._disk_ids)
            self._hashes.update(self.ids().to_pylist())
            self._arrays = []
        return self._hashes

    def has_hashes(self) -> bool:
        return self._hashes is not None

    def count(self) -> int:
        return len(self._hashes) if self._hashes is not None else sum(len(a) for a in self._arrays)

    def small(self, rows: int) -> int:
        """How many of the run's shards hold fewer than `rows` rows."""
        return sum(e.rows < rows for e in self.entries)

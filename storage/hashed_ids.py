"""A run's committed ids as 64-bit hashes: what a writer asks chunk by chunk (which of these ids
are committed?) at 8 bytes an id, where a Python set of the id strings took ~120 (the 10^7 verdict
ids of a 10^6-record validation: ~1.2 GB as a set, by estimate).

The hashes are kept in sorted numpy arrays (runs), with those added since in a small set that
becomes a run of its own once it holds MERGE. Runs are merged size-tiered: a run is merged into
the one before it while that one is less than twice its length, so there are at most about
log2(ids / MERGE) runs, a hash is sorted into a longer run about that many times, and a merge
needs memory for the two runs it merges. (One sorted array rebuilt by np.union1d at every
MERGE ids copied every hash several times over each time: 2*10^6 hashes added 20,000 at a
time took 42 s and peaked at 258 MiB of RSS, where the runs take 3.9 s and 128 MiB; a
10^6-record validation adds 10^7.) An id whose hash is in no run and not in the set is new;
one whose hash is there is looked up among the ids themselves (`read`: the committed ids,
array by array, from the run's shards), so a hash shared by two ids never drops a row. That
read happens only when a hash matches: on a rerun, not in a run that writes new rows.

    ids = HashedIds(lambda: (read_ids(e) for e in entries))
    ids.update(["a", "b"])
    ids.committed(["b", "c"])   # {"b"}
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage.idset import hash_id

MERGE = 1 << 16  # hashes added since the last merge that make the next one


class HashedIds:
    """The committed ids of a run, hashed (module docstring)."""

    def __init__(self, read: Callable[[], Iterable[pa.Array]]):
        self._read = read
        self.runs: list[np.ndarray] = []  # sorted hashes; each run at least twice as long as the next
        self._recent: set[int] = set()
        self._count = 0

    def __len__(self) -> int:
        """How many ids were added."""
        return self._count

    def update(self, ids: list[str]) -> None:
        """Adds committed ids (none committed before)."""
        self._recent.update(map(hash_id, ids))
        self._count += len(ids)
        if len(self._recent) >= MERGE:
            run = np.fromiter(self._recent, np.uint64, len(self._recent))
            self._recent = set()
            run.sort()
            self.runs.append(run)
            while len(self.runs) > 1 and len(self.runs[-2]) < 2 * len(self.runs[-1]):
                last = self.runs.pop()
                merged = np.concatenate([self.runs.pop(), last])
                del last
                merged.sort()
                self.runs.append(merged)

    def _matching(self, ids: list[str]) -> list[str]:
        """The ids whose hash is a committed id's."""
        hashes = [hash_id(x) for x in ids]
        found = np.zeros(len(ids), bool)
        if self.runs:
            h = np.array(hashes, np.uint64)
            for run in self.runs:
                found |= run[np.minimum(np.searchsorted(run, h), len(run) - 1)] == h
        recent = self._recent
        return [x for x, h, f in zip(ids, hashes, found) if f or h in recent]

    def committed(self, ids: list[str]) -> set[str]:
        """Which of `ids` are committed: most often none, answered from the hashes alone."""
        matching = self._matching(ids)
        if not matching:
            return set()
        asked, out = pa.array(matching, pa.string()), set()
        for column in self._read():
            out.update(asked.filter(pc.is_in(asked, value_set=column.cast(pa.string()))).to_pylist())
            if len(out) == len(matching):
                break
        return out

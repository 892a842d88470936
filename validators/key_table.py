"""A multimap from 64-bit keys to ints below 2^31 that only grows, at 12 bytes a pair: the index
of the dedup layer (validators/dedup.py), which at 10^6 records cannot afford a Python dict
entry per band and question.

The newest pairs sit in a dict; whenever it holds `flush` of them they are merged into two
sorted numpy arrays (keys, values). A key's values come back in the order they were added,
older ones first, so a table answers as a dict of lists would.

    t = KeyTable(); t.add(7, 0); t.add(7, 3)
    t.get(7)                          # [0, 3]
    t.first(7)                        # 0
    t.get_many(np.array([7, 8], np.uint64))  # [[0, 3], []]
"""

from __future__ import annotations

import numpy as np


class KeyTable:
    """See the module docstring."""

    def __init__(self, flush: int = 1 << 16) -> None:
        self.keys = np.empty(0, np.uint64)
        self.values = np.empty(0, np.int32)
        self.recent: dict[int, int | list[int]] = {}
        self.pending, self.flush = 0, flush

    def __len__(self) -> int:
        return len(self.keys) + self.pending

    def add(self, key: int, value: int) -> None:
        v = self.recent.get(key)
        if v is None:
            self.recent[key] = value
        elif type(v) is int:
            self.recent[key] = [v, value]
        else:
            v.append(value)
        self.pending += 1
        if self.pending >= self.flush:
            self.merge()

    def merge(self) -> None:
        """Move the dict's pairs into the sorted arrays: each new pair after the older ones of its key."""
        keys: list[int] = []
        values: list[int] = []
        for k, v in self.recent.items():
            if type(v) is int:
                keys.append(k)
                values.append(v)
            else:
                keys.extend([k] * len(v))
                values.extend(v)
        new_keys = np.array(keys, np.uint64)
        order = np.argsort(new_keys, kind="stable")
        new_keys, new_values = new_keys[order], np.array(values, np.int32)[order]
        at = np.searchsorted(self.keys, new_keys, side="right")
        self.keys, self.values = np.insert(self.keys, at, new_keys), np.insert(self.values, at, new_values)
        self.recent.clear()
        self.pending = 0

    def _with_recent(self, key: int, found: list[int]) -> list[int]:
        v = self.recent.get(key)
        if v is None:
            return found
        return found + [v] if type(v) is int else found + v

    def get(self, key: int) -> list[int]:
        """Every value of `key`, in the order they were added."""
        return self.get_many(np.array([key], dtype=np.uint64))[0]

    def first(self, key: int) -> int | None:
        """The first value added for `key`, or None."""
        k = np.uint64(key)
        lo = int(np.searchsorted(self.keys, k, "left"))
        if lo < len(self.keys) and self.keys[lo] == k:
            return int(self.values[lo])
        v = self.recent.get(key)
        return v if v is None or type(v) is int else v[0]

    def get_many(self, keys: np.ndarray) -> list[list[int]]:
        """`get` of each of `keys` (uint64), with one search of the arrays for all of them."""
        lo = np.searchsorted(self.keys, keys, "left").tolist()
        hi = np.searchsorted(self.keys, keys, "right").tolist()
        values = self.values
        return [self._with_recent(k, values[a:b].tolist() if b > a else [])
                for k, a, b in zip(keys.tolist(), lo, hi)]

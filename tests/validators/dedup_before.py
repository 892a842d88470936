"""The dedup index as it was before its keys became 64-bit numbers in KeyTables (frozen, for
tests/validators/test_dedup_same.py): Python dicts with bytes keys per band, a dict of
normalized texts' hashes, of groups and of conversations' hashes."""

from __future__ import annotations

import hashlib

import numpy as np
import xxhash

from generators.answers import normalize
from validators.verdict import Verdict, fail, ok

LAYER = "dataset"
_PRIME = np.uint64((1 << 61) - 1)


class Deduper:
    """The index of one run (module docstring). Signatures sit in one growing numpy array, and
    a band's bucket holds its first record as an int (a list only once a second one shares it),
    so a question costs ~1.5 KB; a record's candidates are compared with it in one vectorised step."""

    def __init__(self, threshold: float = 0.8, ngram: int = 3, num_perm: int = 64, bands: int = 16, seed: int = 1):
        self.threshold, self.ngram, self.num_perm, self.bands = threshold, ngram, num_perm, bands
        rng = np.random.default_rng(seed)
        self.a = rng.integers(1, (1 << 61) - 1, num_perm, dtype=np.uint64)
        self.b = rng.integers(0, (1 << 61) - 1, num_perm, dtype=np.uint64)
        self.exact: dict[str, str] = {}
        self.buckets: list[dict[bytes, int | list[int]]] = [{} for _ in range(bands)]
        self._sigs = np.zeros((1024, num_perm), dtype=np.uint64)
        self.owners: list[str] = []
        self.groups: dict[str, str] = {}  # owner -> its group, for owners that have one
        self.bodies: dict[str, str] = {}  # body hash -> the record of a group that had it first

    def signature(self, text: str) -> np.ndarray:
        return self._signature(normalize(text))

    def _signature(self, norm: str) -> np.ndarray:
        toks = norm.split()
        n = min(self.ngram, max(1, len(toks)))
        shingles = {" ".join(toks[i:i + n]) for i in range(max(1, len(toks) - n + 1))}
        h = np.array([xxhash.xxh64_intdigest(s.encode('utf-8', 'surrogatepass')) for s in shingles], dtype=np.uint64) % _PRIME
        with np.errstate(over="ignore"):
            mixed = (h[:, None] * self.a[None, :] + self.b[None, :]) % _PRIME
        return mixed.min(axis=0)

    def _bands(self, sig: np.ndarray) -> list[bytes]:
        r = self.num_perm // self.bands
        return [sig[i * r:(i + 1) * r].tobytes() for i in range(self.bands)]

    @staticmethod
    def _key(norm: str) -> str:
        return hashlib.sha256(norm.encode('utf-8', 'surrogatepass')).hexdigest()

    def _add(self, owner: str, key: str, sig: np.ndarray) -> None:
        self.exact.setdefault(key, owner)
        idx = len(self.owners)
        if idx == len(self._sigs):
            self._sigs = np.concatenate([self._sigs, np.zeros_like(self._sigs)])
        self._sigs[idx] = sig
        self.owners.append(owner)
        for band, k in zip(self.buckets, self._bands(sig)):
            v = band.get(k)
            if v is None:
                band[k] = idx
            elif type(v) is int:
                band[k] = [v, idx]
            else:
                v.append(idx)

    def add_heldout(self, texts, name: str = "heldout") -> None:
        for i, t in enumerate(texts):
            norm = normalize(t)
            self._add(f"{name}:{i}", self._key(norm), self._signature(norm))

    def _candidates(self, sig: np.ndarray) -> list[int]:
        """Indexed records sharing a band with `sig`, in the order a set of them iterates."""
        found: set[int] = set()
        for band, k in zip(self.buckets, self._bands(sig)):
            v = band.get(k)
            if v is None:
                continue
            if type(v) is int:
                found.add(v)
            else:
                found.update(v)
        return list(found)

    def check(self, record_id: str, text: str, group: str | None = None, body: str | None = None) -> Verdict:
        """Verdict for `text` (of `group`, with `body`: module docstring); a passing text joins
        the index."""
        norm = normalize(text)
        key = self._key(norm)
        first = self.exact.get(key)
        if first is not None and first != record_id and (group is None or self.groups.get(first) != group):
            reason = "heldout_overlap" if first.startswith("heldout") else "exact_duplicate"
            return fail(LAYER, "dedup", reason, score=1.0, detail={"duplicate_of": first})
        if body is not None:
            copy = self.bodies.setdefault(body, record_id)
            if copy != record_id:
                return fail(LAYER, "dedup", "exact_duplicate", score=1.0, detail={"duplicate_of": copy})
        if first is not None and first != record_id:  # another record of the group asked it first
            return ok(LAYER, "dedup", detail={"same_question_as": first})
        sig = self._signature(norm)
        best, best_i = 0.0, None
        cands = [i for i in self._candidates(sig) if self.owners[i] != record_id and
                 (group is None or self.groups.get(self.owners[i]) != group)]
        if cands:
            same = (self._sigs[cands] == sig).sum(axis=1)
            top = int(np.argmax(same))  # the first of the best, as a loop keeping a strictly better one
            if same[top]:
                best, best_i = float(same[top]) / self.num_perm, cands[top]
        if best_i is not None and best >= self.threshold:
            owner = self.owners[best_i]
            reason = "heldout_overlap" if owner.startswith("heldout") else "near_duplicate"
            if body is not None:
                self.bodies.pop(body, None)
            return fail(LAYER, "dedup", reason, score=best, detail={"duplicate_of": owner, "jaccard": round(best, 3)})
        if first is None:
            if group is not None:
                self.groups[record_id] = group
            self._add(record_id, key, sig)
        return ok(LAYER, "dedup", score=best)



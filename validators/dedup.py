"""Layer 5 (dataset): exact and near-duplicate removal across the dataset and against
held-out evaluation files (contamination check).

Exact duplicates share the hash of the normalized text (generators.answers.normalize; 64 bits
of its SHA-256).
Near duplicates: word n-gram shingles -> MinHash signature (numpy, `num_perm` universal
hashes over 64-bit xxhash shingle hashes) -> LSH bands for candidates -> estimated Jaccard
>= threshold. The first record seen wins; later copies are rejected.

Records of one group (`record_group`: the trajectories of one triple, which a synthesis run
makes several of, each its own route, case or offered tools) share their question and answer
on purpose: they are not duplicates of each other, unless their conversations are the same
(`body`: the hash of the messages). The index keeps one signature per question, so it grows
with the questions, not with the trajectories made from them.

    d = Deduper(threshold=0.8); d.add_heldout(["q1", ...]); d.check("some question text")

`DedupCheck` is the layer's check (validators/check.py): its index lives for the run, in
the flow process, and records are checked in record order.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import xxhash

from generators.answers import normalize
from storage.userfiles import iter_records
from validators.check import Check, CheckContext
from validators.key_table import KeyTable
from validators.verdict import Verdict, fail, ok

LAYER = "dataset"
_PRIME = np.uint64((1 << 61) - 1)


def record_text(row: dict, kind: str) -> str:
    """The text two records must not share: question + answer (documents: title + text)."""
    if kind == "documents":
        return f"{row.get('title', '')} {row.get('text', '')}"
    return f"{row.get('question', '')} || {row.get('answer', '')}"


def record_group(row: dict, kind: str) -> str | None:
    """The group whose records may share their text (module docstring): a trajectory's triple."""
    group = row.get("triple_id") if kind == "trajectories" else None
    return group if isinstance(group, str) and group else None


def record_body(row: dict) -> str:
    """A hash of a record's messages: two records of one group with the same body are copies."""
    return hashlib.sha256(json.dumps(row.get("messages"), sort_keys=True, default=str,
                                     ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def bodies(records, kind: str, con) -> list[str | int | None]:
    """`record_body` of each record that has a group, else None. Rows read from a dataset's shards
    are hashed by DuckDB over their Arrow messages (`hash`, 64 bits; the Python rows are not
    rebuilt for it); the values of a user's file by `record_body`."""
    table = records.table
    if kind != "trajectories":
        return [None] * len(records.ids)
    if table is None or "messages" not in table.column_names:
        return [record_body(r) if isinstance(r, dict) and record_group(r, kind) else None for r in records.values]
    con.register("chunk", table.select(["messages"]))
    try:
        return [h for (h,) in con.execute("SELECT hash(messages) FROM chunk").fetchall()]
    finally:
        con.unregister("chunk")


class Deduper:
    """The index of one run (module docstring), compact so that 10^6 records fit: signatures
    sit in numpy blocks, and the exact hashes, the bands and the conversations' hashes are
    64-bit keys in KeyTables (validators/key_table.py), so a question costs about 1 KB and a
    conversation ~100 bytes. A record's candidates are compared with it in one vectorised step."""

    BLOCK = 4096  # signatures per block

    def __init__(self, threshold: float = 0.8, ngram: int = 3, num_perm: int = 64, bands: int = 16, seed: int = 1):
        self.threshold, self.ngram, self.num_perm, self.bands = threshold, ngram, num_perm, bands
        rng = np.random.default_rng(seed)
        self.a = rng.integers(1, (1 << 61) - 1, num_perm, dtype=np.uint64)
        self.b = rng.integers(0, (1 << 61) - 1, num_perm, dtype=np.uint64)
        # a band's key: its values weighted by odd 64-bit numbers of its own, summed (mod 2^64)
        self.mix = rng.integers(0, 1 << 63, (bands, num_perm // bands), dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        self.exact = KeyTable()    # hash of a normalized text -> the record that indexed it
        self.buckets = KeyTable()  # a band's key -> the records whose signature has that band
        self.bodies = KeyTable()   # hash of a conversation -> the first record of a group that had it
        self.body_ids: list[str] = []
        self._blocks: list[np.ndarray] = []
        self.owners: list[str] = []
        self.groups: list[str | None] = []  # each owner's group, None where it has none

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

    def _bands(self, sig: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return (sig[:self.bands * self.mix.shape[1]].reshape(self.mix.shape) * self.mix).sum(axis=1, dtype=np.uint64)

    @staticmethod
    def _key(norm: str) -> int:
        return int.from_bytes(hashlib.sha256(norm.encode('utf-8', 'surrogatepass')).digest()[:8], "little")

    def _add(self, owner: str, sig: np.ndarray, group: str | None = None) -> None:
        """Index `owner`'s signature (its exact hash is the caller's to add)."""
        idx = len(self.owners)
        if idx % self.BLOCK == 0:
            self._blocks.append(np.empty((self.BLOCK, self.num_perm), dtype=np.uint64))
        self._blocks[-1][idx % self.BLOCK] = sig
        self.owners.append(owner)
        self.groups.append(group)
        for k in self._bands(sig).tolist():
            self.buckets.add(k, idx)

    def _signatures(self, idx: list[int]) -> np.ndarray:
        """The signatures of indexed records `idx`, in their order."""
        if len(idx) <= 8:
            return np.stack([self._blocks[i // self.BLOCK][i % self.BLOCK] for i in idx])
        at = np.array(idx, dtype=np.int64)
        block, row = at // self.BLOCK, at % self.BLOCK
        out = np.empty((len(at), self.num_perm), dtype=np.uint64)
        for b in np.unique(block).tolist():
            m = block == b
            out[m] = self._blocks[b][row[m]]
        return out

    def add_heldout(self, texts, name: str = "heldout") -> None:
        for i, t in enumerate(texts):
            norm = normalize(t)
            key = self._key(norm)
            if self.exact.first(key) is None:
                self.exact.add(key, len(self.owners))
            self._add(f"{name}:{i}", self._signature(norm))

    def _candidates(self, sig: np.ndarray) -> list[int]:
        """Indexed records sharing a band with `sig`, in the order a set of them iterates."""
        found: set[int] = set()
        for v in self.buckets.get_many(self._bands(sig)):
            found.update(v)
        return list(found)

    def _body(self, body: str | int) -> tuple[int, str | None]:
        """The conversation's key, and the record of a group that had it first (None: none had it)."""
        key = body if type(body) is int else xxhash.xxh64_intdigest(str(body).encode("utf-8", "surrogatepass"))
        j = self.bodies.first(key)
        return key, None if j is None else self.body_ids[j]

    def _keep_body(self, key: int | None, record_id: str) -> None:
        if key is not None:
            self.bodies.add(key, len(self.body_ids))
            self.body_ids.append(record_id)

    def check(self, record_id: str, text: str, group: str | None = None, body: str | int | None = None) -> Verdict:
        """Verdict for `text` (of `group`, with `body`, a hash of its conversation: module
        docstring); a passing text joins the index."""
        norm = normalize(text)
        key = self._key(norm)
        first_i = self.exact.first(key)
        first = None if first_i is None else self.owners[first_i]
        if first is not None and first != record_id and (group is None or self.groups[first_i] != group):
            reason = "heldout_overlap" if first.startswith("heldout") else "exact_duplicate"
            return fail(LAYER, "dedup", reason, score=1.0, detail={"duplicate_of": first})
        new_body = None
        if body is not None:
            body_key, copy = self._body(body)
            if copy is None:
                new_body = body_key
            elif copy != record_id:
                return fail(LAYER, "dedup", "exact_duplicate", score=1.0, detail={"duplicate_of": copy})
        if first is not None and first != record_id:  # another record of the group asked it first
            self._keep_body(new_body, record_id)
            return ok(LAYER, "dedup", detail={"same_question_as": first})
        sig = self._signature(norm)
        best, best_i = 0.0, None
        cands = [i for i in self._candidates(sig) if self.owners[i] != record_id and
                 (group is None or self.groups[i] != group)]
        if cands:
            same = (self._signatures(cands) == sig).sum(axis=1)
            top = int(np.argmax(same))  # the first of the best, as a loop keeping a strictly better one
            if same[top]:
                best, best_i = float(same[top]) / self.num_perm, cands[top]
        if best_i is not None and best >= self.threshold:
            owner = self.owners[best_i]
            reason = "heldout_overlap" if owner.startswith("heldout") else "near_duplicate"
            return fail(LAYER, "dedup", reason, score=best, detail={"duplicate_of": owner, "jaccard": round(best, 3)})
        if first is None:
            self.exact.add(key, len(self.owners))
            self._add(record_id, sig, group)
        self._keep_body(new_body, record_id)
        return ok(LAYER, "dedup", score=best)


def read_heldout(path: str) -> list[str]:
    """Texts of a held-out file: records (JSONL, JSON array, Parquet: storage/userfiles.py)
    give their question and answer, other JSON values their text; any other file gives one
    item per line. ValueError naming the place of a line that is not JSON."""
    p = Path(path)
    if p.name.lower().removesuffix(".gz").rsplit(".", 1)[-1] not in ("jsonl", "json", "parquet"):
        return [x for x in p.read_text().splitlines() if x.strip()]
    out = []
    for r in iter_records(p):
        if r.record is None and r.value is None:
            raise ValueError(f"{path} {r.where}: {r.error}")
        out.append(record_text(r.record, "tasks") if r.record is not None else str(r.value))
    return out


class DedupCheck(Check):
    name, layer, verdict_layer, per_record = "dedup", "dedup", LAYER, False
    reasons = ("exact_duplicate", "near_duplicate", "heldout_overlap", "check_crashed")
    columns = ("question", "answer", "title", "text", "triple_id")  # what it reads (and the messages' hash)

    def start(self, ctx: CheckContext) -> None:
        import duckdb

        o = ctx.options
        ctx.state[self.name] = d = Deduper(o.dedup_threshold, o.dedup_ngram)
        ctx.state[f"{self.name}:con"] = con = duckdb.connect()
        con.execute("SET enable_progress_bar_print = false")  # (DuckDB draws its bar on stdout)
        for f in o.heldout:
            d.add_heldout(read_heldout(f), name=f"heldout:{Path(f).name}")

    def _each(self, records, ctx: CheckContext):
        """(id, row, body) of each record; a record without a group has no body."""
        rows = records.fields(self.columns)
        body = bodies(records, ctx.kind, ctx.state[f"{self.name}:con"])
        return [(rid, row, b if isinstance(row, dict) and record_group(row, ctx.kind) else None)
                for rid, row, b in zip(records.ids, rows, body)]

    def remember(self, records, ctx: CheckContext) -> None:
        d = ctx.state[self.name]
        for rid, row, body in self._each(records, ctx):
            if isinstance(row, dict):
                d.check(rid, record_text(row, ctx.kind), record_group(row, ctx.kind), body)

    def run(self, records, ctx: CheckContext) -> list[list[Verdict]]:
        d, out = ctx.state[self.name], []
        for rid, row, body in self._each(records, ctx):
            try:
                out.append([d.check(rid, record_text(row, ctx.kind), record_group(row, ctx.kind), body)])
            except Exception as e:  # data is data: reject, never crash
                out.append([Verdict(LAYER, "dedup", False, "check_crashed", detail=f"{type(e).__name__}: {e}"[:300])])
        return out


def _check(d: Deduper, record_id: str, row: dict, kind: str) -> Verdict:
    """One record of `kind` through `d`, as the check does it (its body from its messages)."""
    group = record_group(row, kind)
    return d.check(record_id, record_text(row, kind), group, record_body(row) if group else None)

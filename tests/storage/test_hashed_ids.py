"""The committed ids a writer checks against, hashed (storage/hashed_ids.py): exact whatever the
hashes share, and a fraction of the memory of a set of the strings; a writer over them drops
exactly the committed rows of a batch."""

from __future__ import annotations

import random
import tracemalloc

import pyarrow as pa

from storage import hashed_ids
from storage.hashed_ids import HashedIds
from storage import ShardWriter, load_table


def _ids(rng: random.Random, n: int) -> list[str]:
    return [f"{rng.getrandbits(128):032x}" for _ in range(n)]


def test_committed_is_exact_even_where_ids_share_a_hash(monkeypatch):
    """With a hash of 4 bits (most ids share one) the answers still equal a set's, through
    merges of the recent hashes into the sorted table."""
    monkeypatch.setattr(hashed_ids, "hash_id", lambda x: hash(x) & 15)
    monkeypatch.setattr(hashed_ids, "MERGE", 50)
    rng = random.Random(3)
    stored: list[pa.Array] = []
    table, known = HashedIds(lambda: iter(stored)), set()
    for _ in range(20):
        batch = _ids(rng, 40)
        asked = rng.sample(sorted(known), min(10, len(known))) + _ids(rng, 10) + batch[:5]
        assert table.committed(asked) == known.intersection(asked)
        stored.append(pa.array(batch))
        table.update(batch)
        known.update(batch)
    assert len(table) == len(known) == 800 and table.committed(sorted(known)[:100]) == set(sorted(known)[:100])


def test_new_ids_are_answered_without_reading_the_ids():
    reads = []
    stored = [pa.array(_ids(random.Random(1), 1000))]
    table = HashedIds(lambda: reads.append(1) or iter(stored))
    table.update(stored[0].to_pylist())
    assert table.committed(_ids(random.Random(2), 1000)) == set() and reads == []
    assert table.committed(stored[0].to_pylist()[:3] + ["new"]) == set(stored[0].to_pylist()[:3]) and reads == [1]


def test_a_million_ids_take_a_fraction_of_a_set_of_them():
    """What a run's state held before: a set of the ids as strings read from Arrow (each a new
    string); the hashed table of the same ids takes under 16 MiB, a fifth of that or less, and
    never needed half as much again on the way (one sorted array rebuilt with np.union1d at
    every merge peaked at 3.5 times it)."""
    column = pa.array(_ids(random.Random(4), 1_000_000))
    tracemalloc.start()
    try:
        table = HashedIds(lambda: iter(()))
        for i in range(0, len(column), 10_000):
            table.update(column.slice(i, 10_000).to_pylist())
        hashed, peak = tracemalloc.get_traced_memory()
        strings = set(column.to_pylist())
        as_set = tracemalloc.get_traced_memory()[0] - hashed
    finally:
        tracemalloc.stop()
    assert len(table) == len(strings) == 1_000_000
    assert hashed < 16 * 2**20 and hashed * 5 < as_set
    assert peak - hashed < hashed // 2
    lengths = [len(r) for r in table.runs]  # size-tiered: each run at least twice as long as the next
    assert 1 < len(lengths) <= 5 and all(a >= 2 * b for a, b in zip(lengths, lengths[1:]))


def test_a_writer_drops_exactly_the_committed_rows_of_a_batch(data_root):
    """Chunk by chunk (the hashed path), a batch that repeats committed rows among new ones keeps
    only the new ones, and the run holds every id once."""
    docs = [{"doc_id": f"d{i}", "title": f"T{i}", "text": f"x {i}", "source": "t"} for i in range(250)]
    with ShardWriter(None, "demo", "documents", "r1", rows_per_shard=50) as w:
        for i in range(0, 200, 20):
            w.write(docs[i:i + 20])
    with ShardWriter(None, "demo", "documents", "r1", rows_per_shard=50) as w:
        assert w.write(docs[150:250]) == 50 and w.skipped == 50
        assert w.known_count() == len(w.known_ids()) == 250  # (counted from the hashes)
    ids = load_table("demo", "documents").column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 250

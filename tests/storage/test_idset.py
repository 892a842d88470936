"""IdSet: exact membership of string ids, from Arrow or Python, with repeats and nulls."""

import random

import pyarrow as pa

from storage.idset import IdSet


def test_membership_is_exact():
    rng = random.Random(0)
    ids = [f"{rng.getrandbits(96):024x}" for _ in range(20_000)]
    s = IdSet(pa.chunked_array([pa.array(ids[:10_000] + [None]), pa.array(ids[10_000:] + ids[:5])]))
    assert len(s) == 20_000
    assert all(i in s for i in ids)
    assert not any(f"{rng.getrandbits(96):024x}" in s for _ in range(20_000))
    assert "" not in s and None not in s and 5 not in s
    assert "x" in IdSet(["x", "y"]) and "z" not in IdSet(["x", "y"]) and "x" not in IdSet()

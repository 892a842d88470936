"""The compact dedup index (validators/dedup.py over validators/key_table.py) gives exactly the
verdicts of the index before it (tests/validators/dedup_before.py, frozen): reason, score and
the record named as the duplicate, on random streams full of exact copies, near copies,
held-out texts, groups sharing a question, repeated conversations and records checked again;
with tables that merge every few pairs, so the sorted arrays are read as much as the dict."""

from __future__ import annotations

import random

import numpy as np

from tests.validators import dedup_before as before
from validators.dedup import Deduper
from validators.key_table import KeyTable

WORDS = ("river city north founded company novel crowns published born writer mathematician engine "
         "who which when where how many people live census kingdom old first program analytical").split()


def _stream(rng: random.Random, n: int, held: list[str]):
    texts = list(held)
    seen: list[tuple] = []
    for i in range(n):
        if seen and rng.random() < 0.05:  # a record checked again (a resumed run), as it was
            yield rng.choice(seen)
            continue
        roll = rng.random()
        if texts and roll < 0.15:
            text = rng.choice(texts)  # an exact copy
        elif texts and roll < 0.45:  # a near copy: one word changed, added or dropped
            words = rng.choice(texts).split()
            at = rng.randrange(len(words))
            op = rng.randrange(3)
            if op == 0:
                words[at] = rng.choice(WORDS)
            elif op == 1:
                words.insert(at, rng.choice(WORDS))
            elif len(words) > 1:
                del words[at]
            text = " ".join(words)
        else:
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 24)))
        if rng.random() < 0.2:
            text = text.upper() + rng.choice(["", "!", " ?"])
        texts.append(text)
        group = rng.choice([None, "t0", "t1", "t2", "t3"])
        body = None if group is None else rng.choice([1, 2**63 + 5, "b1", f"u{i}", i, 10**6 + i])
        seen.append((f"r{i}", text, group, body))
        yield seen[-1]


def test_the_compact_index_gives_the_verdicts_of_the_dicts():
    compared = {"exact_duplicate": 0, "near_duplicate": 0, "heldout_overlap": 0, "ok": 0}
    for seed in range(12):
        rng = random.Random(seed)
        threshold = rng.choice([0.5, 0.7, 0.8, 0.9])
        old, new = before.Deduper(threshold=threshold), Deduper(threshold=threshold)
        flush = rng.choice([1, 3, 50, 1 << 16])
        new.exact, new.buckets, new.bodies = KeyTable(flush), KeyTable(flush), KeyTable(flush)
        held = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(rng.randint(5, 40))]
        old.add_heldout(held)
        new.add_heldout(held)
        for rid, text, group, body in _stream(rng, 400, held):
            a, b = old.check(rid, text, group, body), new.check(rid, text, group, body)
            assert (a.passed, a.reason, a.score, a.detail) == (b.passed, b.reason, b.score, b.detail), (seed, rid, text)
            compared[a.reason] += 1
    assert min(compared.values()) >= 50, compared  # every verdict was met often


def test_a_key_table_answers_as_a_dict_of_lists():
    rng = random.Random(3)
    for flush in (1, 2, 7, 1000):
        table, truth = KeyTable(flush), {}
        for _ in range(3000):
            key = rng.choice([0, 1, 2**64 - 1, rng.randrange(2**64), rng.randrange(40)])
            value = rng.randrange(2**31)
            table.add(key, value)
            truth.setdefault(key, []).append(value)
            probe = rng.choice([key, rng.randrange(50), 2**64 - 1])
            assert table.get(probe) == truth.get(probe, [])
            assert table.first(probe) == truth.get(probe, [None])[0]
        keys = list(truth) + [12345678901, 2**63]
        assert table.get_many(np.array(keys, dtype=np.uint64)) == [truth.get(k, []) for k in keys]
        assert len(table) == sum(len(v) for v in truth.values())

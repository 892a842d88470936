"""generators/tools/retrieval.py against bm25s itself: the same tokens as bm25s.tokenize, the
same scores as bm25s's dense scoring (bit for bit, the documents above zero), and the ranking
the simulator always had (best score first, ties by index), on random corpora and queries."""

from __future__ import annotations

import random

import bm25s
import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from generators.tools import retrieval
from generators.tools.retrieval import BM25Index

VOCAB = ["river", "Ferrow", "born", "the", "in", "city", "1887", "Taldis", "a", "of", "Ünter", "straße", "x1",
         "ab-cd", "don't", "BORN", "founded", "and", "it's", "_", "école"]


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n)) + rng.choice([".", "!", "", " 12"])


def _dense_rank(scores: np.ndarray, mask: np.ndarray, exclude: list[int], m: int) -> list[int]:
    """The ranking as the simulator did it over bm25s's dense scores."""
    s = np.where(mask, scores, -np.inf)
    s[exclude] = -np.inf
    idx = np.flatnonzero(s > 0)
    return [int(i) for i in idx[np.lexsort((idx, -s[idx]))][:m]]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([0, retrieval.SMALL]))
@example(10068, retrieval.SMALL)  # a corpus of one text without a token: bm25s cannot index it, nothing scores
def test_tokens_scores_and_ranking_are_bm25s(seed, small):
    """(`small`: `top` ranks with numpy alone, or ranks these small corpora's candidates in Python.)"""
    old, retrieval.SMALL = retrieval.SMALL, small
    try:
        _same_as_bm25s(seed)
    finally:
        retrieval.SMALL = old


def _same_as_bm25s(seed: int) -> None:
    rng = random.Random(seed)
    texts = [_text(rng, rng.randint(0, 12)) for _ in range(rng.randint(1, 60))]
    index = BM25Index(texts)
    queries = [_text(rng, rng.randint(0, 5)) for _ in range(20)] + ["", "the of a", "river city", "river city"]
    for t in texts + queries:
        assert index.tokenize(t) == bm25s.tokenize([t], stopwords="en", return_ids=False, show_progress=False)[0]
    for q, scored in zip(queries, index.score_many(queries)):
        dense = index.scores(q)
        assert np.array_equal(scored.docs, np.flatnonzero(dense > 0))
        assert np.array_equal(scored.scores, dense[scored.docs])  # bit for bit
        mask = np.array([rng.random() < 0.7 for _ in texts])
        exclude = rng.sample(range(len(texts)), min(3, len(texts)))
        for m in (1, 3, 8, 100):
            assert index.top(scored, mask, exclude, m) == _dense_rank(dense, mask, exclude, m)

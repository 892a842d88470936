"""The index generators/tools/bm25_build.BM25 builds is bm25s's own, array for array, bit for bit."""

from __future__ import annotations

import random

import bm25s
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from generators.tools.bm25_build import BM25
from generators.tools.retrieval import BM25Index

METHODS = ["lucene", "robertson", "atire", "bm25l", "bm25+"]


def corpus(seed: int) -> tuple[list[list[int]], dict[str, int]]:
    """Random documents as token ids: Zipf-like word draws, repeats, an empty document now and then."""
    rnd = random.Random(seed)
    words = [f"w{i}" for i in range(rnd.randint(1, 300))]
    docs = []
    for _ in range(rnd.randint(1, 120)):
        n = 0 if rnd.random() < 0.05 else rnd.randint(1, 60)
        docs.append([min(int(rnd.paretovariate(1.1)) - 1, len(words) - 1) for _ in range(n)])
    used = sorted({t for d in docs for t in d})  # the vocabulary bm25s is given: ids 0..V-1, each used
    renumber = {t: i for i, t in enumerate(used)}
    return [[renumber[t] for t in d] for d in docs], {words[t]: renumber[t] for t in used}


def assert_same(ours: bm25s.BM25, theirs: bm25s.BM25) -> None:
    assert ours.scores["num_docs"] == theirs.scores["num_docs"]
    for key in ("data", "indices", "indptr"):
        a, b = ours.scores[key], theirs.scores[key]
        assert a.dtype == b.dtype and a.shape == b.shape, key
        assert a.tobytes() == b.tobytes(), key  # (bit for bit: the float32 scores too)
    assert ours.vocab_dict == theirs.vocab_dict


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(METHODS))
def test_same_index_as_bm25s_on_random_corpora(seed, method):
    ids, vocab = corpus(seed)
    if not vocab:
        return
    ours, theirs = BM25(method=method), bm25s.BM25(method=method)
    ours.index((ids, dict(vocab)), show_progress=False)
    theirs.index((ids, dict(vocab)), show_progress=False)
    assert_same(ours, theirs)
    query = list(range(min(3, len(vocab))))
    assert ours.get_scores_from_ids(query).tobytes() == theirs.get_scores_from_ids(query).tobytes()


@pytest.mark.parametrize("k1,b", [(1.5, 0.75), (0.9, 0.4), (2.0, 1.0)])
def test_same_index_with_other_parameters(k1, b):
    ids, vocab = corpus(7)
    ours, theirs = BM25(k1=k1, b=b), bm25s.BM25(k1=k1, b=b)
    ours.index((ids, dict(vocab)), show_progress=False)
    theirs.index((ids, dict(vocab)), show_progress=False)
    assert_same(ours, theirs)


def test_bm25_index_scores_as_bm25s_indexes_its_texts():
    rnd = random.Random(3)
    words = ["ada", "lovelace", "london", "river", "the", "of", "née", "Straße", "x", "engine", "1815", "born"]
    texts = [" ".join(rnd.choice(words) for _ in range(rnd.randint(0, 25))) for _ in range(400)]
    index = BM25Index(texts)
    theirs = bm25s.BM25()
    theirs.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    for q in ["ada lovelace", "london river engine", "née straße 1815", "born"]:
        ours_scores = index.scores(q)
        their_scores = theirs.get_scores(bm25s.tokenize([q], stopwords="en", return_ids=False,
                                                       show_progress=False)[0])
        assert np.array_equal(ours_scores, their_scores), q

"""generators/tools/bm25_saved.py: a BM25 index kept on disk is read back, not built again,
and answers bit for bit as the index built from the texts; a broken or foreign folder is built
again; only the indexes used last are kept."""

from __future__ import annotations

import os
import random
import time

import bm25s
import numpy as np
import pytest

from generators.tools import bm25_saved
from generators.tools.bm25_saved import load_or_build, path_of
from generators.tools.retrieval import BM25Index

WORDS = ["river", "Ferrow", "born", "city", "1887", "Taldis", "founded", "école", "Ünter", "harbour", "mill", "x1"]


def _texts(seed: int, n: int = 300) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 15))) for _ in range(n)]


def _same(a: BM25Index, b: BM25Index, seed: int) -> None:
    rng = random.Random(seed)
    for q in [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) for _ in range(200)] + ["", "nothing"]:
        x, y = a.score(q), b.score(q)
        assert np.array_equal(x.docs, y.docs) and np.array_equal(x.scores, y.scores), q
        assert np.array_equal(a.scores(q), b.scores(q))


@pytest.fixture
def no_indexing(monkeypatch):
    """bm25s refuses to index: whatever answers must have been read from disk."""
    def refuse(*a, **k):
        raise AssertionError("indexed again")

    return lambda: monkeypatch.setattr(bm25s.BM25, "index", refuse)


def test_a_kept_index_is_read_back_and_answers_the_same(tmp_path, no_indexing):
    texts = _texts(1)
    built = load_or_build(texts, "en", tmp_path)
    assert path_of(texts, "en", tmp_path).is_dir()
    no_indexing()
    read = load_or_build(list(texts), "en", tmp_path)
    assert read.indexed and read.size == len(texts) and read.fingerprint == built.fingerprint
    _same(read, built, 1)
    with pytest.raises(AssertionError, match="indexed again"):
        load_or_build(_texts(2), "en", tmp_path)  # other texts: another index, built


def test_other_texts_or_stopwords_get_their_own_index(tmp_path):
    a, b = _texts(3), _texts(3)
    b[7] += " mill"
    assert len({path_of(a, "en", tmp_path), path_of(b, "en", tmp_path), path_of(a, "none", tmp_path)}) == 3
    _same(load_or_build(b, "en", tmp_path), BM25Index(b), 3)


def test_a_broken_index_is_built_again(tmp_path):
    texts = _texts(4)
    load_or_build(texts, "en", tmp_path)
    path = path_of(texts, "en", tmp_path)
    (path / "vocab.index.json").write_text("{not json")
    again = load_or_build(texts, "en", tmp_path)
    _same(again, BM25Index(texts), 4)
    assert bm25_saved._read(path, len(texts)) is not None  # kept whole in its place
    # a folder that holds another corpus's index under this key (copied by hand) is not used
    other = _texts(5, 120)
    load_or_build(other, "en", tmp_path)
    for f in path.iterdir():
        f.unlink()
    for f in path_of(other, "en", tmp_path).iterdir():
        (path / f.name).write_bytes(f.read_bytes())
    _same(load_or_build(texts, "en", tmp_path), BM25Index(texts), 4)


def test_a_corpus_without_a_token_is_not_kept(tmp_path):
    index = load_or_build(["", "a"], "en", tmp_path)
    assert not index.indexed and not list(tmp_path.iterdir())


def test_only_the_indexes_used_last_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(bm25_saved, "KEEP", 3)
    stale = tmp_path / ".bm25-left"
    stale.mkdir()
    old = time.time() - 2 * bm25_saved.STALE_S
    os.utime(stale, (old, old))
    fresh = tmp_path / ".bm25-writing"
    fresh.mkdir()
    corpora = [_texts(10 + i, 40) for i in range(5)]
    for i, texts in enumerate(corpora):
        load_or_build(texts, "en", tmp_path)
        t = time.time() - 100 + i  # (mtimes apart: the order of use)
        os.utime(path_of(texts, "en", tmp_path), (t, t))
    load_or_build(corpora[0], "en", tmp_path)  # read: used last now
    load_or_build(_texts(99, 40), "en", tmp_path)  # a sixth: the oldest go
    kept = {p.name for p in tmp_path.iterdir() if p.name.startswith("bm25-")}
    assert kept == {path_of(t, "en", tmp_path).name for t in (corpora[0], corpora[4], _texts(99, 40))}
    assert not stale.exists() and fresh.exists()

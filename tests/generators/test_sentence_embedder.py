"""The sentence embedder stores every vector it computes (generators/tools/sentence_embedder.py):
a later embedder (a later process) reads the same vectors bit for bit without loading the model,
and loads it only for a text no one stored; a store in another folder, or none, is independent."""

from __future__ import annotations

import numpy as np

from generators.tools.sentence_embedder import Embedder

TEXTS = ["find people by name", "search biographies", "find people by name"]


def test_stored_vectors_are_read_back_without_the_model(tmp_path):
    first = Embedder(store=tmp_path / "store")
    vecs = first.encode(TEXTS)
    assert first._model is not None and len(list((tmp_path / "store").glob("*.npy"))) == 2

    later = Embedder(store=tmp_path / "store")
    assert np.array_equal(later.encode(TEXTS), vecs) and later._model is None
    assert later.encode([]).shape == (0, first.dim)

    new = later.encode(["look up a city"])  # not stored: the model loads for it, and it is stored
    assert later._model is not None and np.array_equal(new, first.encode(["look up a city"]))
    assert len(list((tmp_path / "store").glob("*.npy"))) == 3

    alone = Embedder(store=None)  # no store: the same vectors, computed
    assert np.array_equal(alone.encode(TEXTS), vecs) and alone._model is not None


def test_the_default_store_is_under_the_cache_and_names_the_model(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGEPLAY_CACHE", str(tmp_path))
    e = Embedder()
    assert e.store.parent == tmp_path / "embeddings" and e.store.name.endswith(f"-{e.max_length}")
    assert Embedder(max_length=64).store != e.store  # another length, other vectors

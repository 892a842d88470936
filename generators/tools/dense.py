"""The `dense` retriever: the MiniLM sentence encoder (generators/tools/sentence_embedder.py)
and an exact index, inner products of unit vectors as one matrix product per batch.

Answers must replay byte for byte, whatever the batch a query comes in:
- a query is encoded by itself (a batched forward pass changes a vector's last bits with its
  neighbours), and remembered (a bounded cache);
- vectors are rounded to integers (x 4000; |x| <= 1) kept in float32: an inner product of two
  is then an integer below 2**24, which float32 holds exactly in any order of summation, so a
  document's score does not depend on the batch shape or the BLAS kernel;
- passages are encoded once, in batches of similar length, and kept on disk by fingerprint
  (`<index_dir>/dense-<fingerprint>.npy`): a server and an in-process index of one corpus read
  the same vectors.

No approximate-search library (faiss, hnswlib, annoy, usearch) is installed here, so the index
is exact: at 50,000 passages one batch of 64 queries is a (64 x 384) x (384 x 50,000) product.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from generators.tools.retrieval import Scored
from generators.tools.passages import text_hash

SCALE = 4000.0  # (4000 + 0.5 * sqrt(384))**2 < 2**24: every partial sum of a product is exact
BATCH = 32  # passages per forward pass while indexing
QUERY_CACHE = 50_000


def quantize(vectors: np.ndarray) -> np.ndarray:
    """Unit vectors as integers x SCALE, in float32 (their products are exact)."""
    return np.rint(np.asarray(vectors, dtype=np.float64) * SCALE).astype(np.float32)


class DenseIndex:
    """Exact dense retrieval over `passages` (module docstring)."""

    name = "dense"

    def __init__(self, passages: Sequence[str], depth: int = 100, index_dir: str | Path | None = None,
                 embedder=None, progress: bool = True):
        from generators.tools.sentence_embedder import get_embedder, model_fingerprint

        self.embedder = embedder or get_embedder()
        self.depth = depth
        self.size = len(passages)
        self.fingerprint = text_hash(["dense", model_fingerprint(self.embedder.path), self.embedder.max_length,
                                      SCALE, BATCH, text_hash(passages)])
        self.vectors = self._load_or_encode(passages, index_dir, progress)
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()  # (threads of a flow may share one index)

    def _load_or_encode(self, passages: Sequence[str], index_dir, progress: bool) -> np.ndarray:
        path = Path(index_dir) / f"dense-{self.fingerprint}.npy" if index_dir else None
        if path is not None and path.exists():
            got = np.load(path)
            if got.shape == (self.size, self.embedder.dim):
                return got
        vectors = self.encode_passages(passages, progress)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            with open(tmp, "wb") as f:
                np.save(f, vectors)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        return vectors

    def encode_passages(self, passages: Sequence[str], progress: bool = True) -> np.ndarray:
        """Quantized vectors of `passages`, in batches of passages of similar length (the
        batches depend only on the passages, so the vectors do too)."""
        out = np.zeros((len(passages), self.embedder.dim), dtype=np.float32)
        order = sorted(range(len(passages)), key=lambda i: (len(passages[i]), i))
        bar = None
        if progress and len(passages) > 2000:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(passages), desc="dense index", unit="passage")
        for s in range(0, len(order), BATCH):
            idx = order[s:s + BATCH]
            out[idx] = quantize(self.embedder.encode_batch([passages[i] for i in idx]))
            if bar is not None:
                bar.update(len(idx))
        if bar is not None:
            bar.close()
        return out

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Quantized vectors of `queries`, each encoded by itself (module docstring)."""
        out = np.zeros((len(queries), self.embedder.dim), dtype=np.float32)
        for j, q in enumerate(queries):
            v = self._queries.get(q)
            if v is None:
                v = self._queries[q] = quantize(self.embedder.encode_batch([q])[0])
                if len(self._queries) > QUERY_CACHE:
                    self._queries.popitem(last=False)
            out[j] = v
        return out

    def score_many(self, queries: Iterable[str]) -> list[Scored]:
        """Each query's best `depth` documents (and any tied with the last), scores = cosine."""
        queries = list(queries)
        with self._lock:
            got = self._score(list(dict.fromkeys(queries)))
        return [got[q] for q in queries]

    def _score(self, uniq: list[str]) -> dict[str, Scored]:
        got: dict[str, Scored] = {}
        for s in range(0, len(uniq), 64):
            part = uniq[s:s + 64]
            scores = self.encode_queries(part) @ self.vectors.T  # exact integers (module docstring)
            for q, row in zip(part, scores):
                got[q] = self._best(row)
        return got

    def _best(self, row: np.ndarray) -> Scored:
        if not self.size:
            return Scored(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
        m = min(self.depth, self.size)
        cut = np.partition(row, self.size - m)[self.size - m]
        docs = np.flatnonzero(row >= cut)
        return Scored(docs, (row[docs] / np.float32(SCALE * SCALE)).astype(np.float32))

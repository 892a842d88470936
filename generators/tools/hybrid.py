"""The `hybrid` retriever: reciprocal-rank fusion (Cormack et al. 2009) of bm25 and dense.

Each query's best `depth` documents of each retriever (ranked by score, ties by index) score
1 / (K + rank) in each list they are in (rank from 1, K = 60); a document's score is the sum,
so a page both find near the top beats one that only one of them likes. Both parts are
deterministic, so the fusion is.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from generators.tools.retrieval import BM25Index, Scored
from generators.tools.passages import text_hash

K = 60


def ranking(s: Scored, depth: int) -> np.ndarray:
    """The best `depth` candidates of `s`, best first, ties by index."""
    order = np.lexsort((s.docs, -s.scores))[:depth]
    return s.docs[order]


class HybridIndex:
    """Reciprocal-rank fusion of a BM25Index and a DenseIndex over the same passages."""

    name = "hybrid"

    def __init__(self, bm25: BM25Index, dense, depth: int = 100):
        self.bm25, self.dense, self.depth = bm25, dense, depth
        self.fingerprint = text_hash(["hybrid", K, depth, bm25.fingerprint, dense.fingerprint])

    def score_many(self, queries: Iterable[str]) -> list[Scored]:
        queries = list(queries)
        return [self.fuse(b, d) for b, d in zip(self.bm25.score_many(queries), self.dense.score_many(queries))]

    def fuse(self, b: Scored, d: Scored) -> Scored:
        rb, rd = ranking(b, self.depth), ranking(d, self.depth)
        docs = np.union1d(rb, rd)
        score = np.zeros(len(docs), dtype=np.float64)
        for ranked in (rb, rd):  # (the same order of additions every time)
            score[np.searchsorted(docs, ranked)] += 1.0 / (K + np.arange(1, len(ranked) + 1))
        return Scored(docs.astype(np.int64), score.astype(np.float32))

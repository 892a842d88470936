"""BM25 retrieval for the tool simulator: bm25s's index, scored in batches.

bm25s scores a query by adding, token by token, each token's precomputed score row into a
vector over every document (one vectorised pass, so the scores are bit for bit bm25s's). A
query whose tokens occur in few documents (SMALL postings in all: most of the simulator's, which
look up a name) is added up in Python over those documents alone, in the same order and rounded
to float32 after each addition as bm25s's float32 vector is: the same scores, bit for bit. Only
documents that share a token with the query score above zero: they are kept (`Scored`), and
ranking, masking by domain and excluding the golden pages work on them alone, not on a vector
over the corpus. A batch of queries is tokenized once, and a query asked twice in a batch,
or asked again soon after, is scored once.

    index = BM25Index([f"{title}\\n{text}" for ...], stopwords="en")
    hits = index.score_many(["Ada Lovelace birthplace", "London"])   # [Scored, Scored]
    index.top(hits[0], mask, exclude={3}, m=5)                        # doc indices, best first
    index.scores("London")                                            # a dense vector (bm25s's own)

`tokenize` is bm25s.tokenize(..., return_ids=False) for one text (lower case, the
scikit-learn token pattern, stopwords removed) without its per-call progress bar.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable, Sequence

import bm25s
import numpy as np
from bm25s.tokenization import _infer_stopwords

from generators.tools.bm25_build import BM25

logging.getLogger("bm25s").setLevel(logging.WARNING)  # its index-building DEBUG lines are noise here

TOKEN_PATTERN = re.compile(r"(?u)\b\w\w+\b")  # bm25s.tokenize's default
RECENT = 64  # queries whose scores an index keeps (`BM25Index.score_many`)
SMALL = 64  # candidates that `BM25Index.top` ranks, and postings that `BM25Index.score` adds up, in Python


@dataclass(frozen=True)
class Scored:
    """The documents a query scores above zero: indices (ascending) and their float32 scores."""

    docs: np.ndarray
    scores: np.ndarray


EMPTY = Scored(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))


def fingerprint_of(texts: Sequence[str], stopwords: str) -> str:
    """What a BM25 index of `texts` answers from: its texts in order, the stopwords, bm25s's version."""
    from generators.tools.passages import text_hash

    return text_hash(["bm25", bm25s.__version__, stopwords, text_hash(texts)])


class BM25Index:
    """A bm25s index over `texts` (one passage per document, index order = document order);
    the `bm25` retriever (generators/tools/retriever.py)."""

    name = "bm25"

    def __init__(self, texts: Sequence[str], stopwords: str = "en", retriever: bm25s.BM25 | None = None):
        """Index `texts`; or take `retriever`, bm25s's index of them built before (read back
        from disk: generators/tools/bm25_saved.py)."""
        self.stopwords = frozenset(_infer_stopwords(stopwords))
        self.size = len(texts)
        self._texts, self._stopword_list = texts, stopwords
        self._fingerprint: str | None = None
        self._tokens: dict[str, list[str]] = {}
        self._recent: OrderedDict[str, Scored] = OrderedDict()  # the last queries' scores (`score_many`)
        self._starts: list[int] | None = None  # where each token's postings start (bm25s's indptr, as ints)
        if retriever is not None:
            self.retriever, self.indexed = retriever, True
            return
        self.retriever = BM25()  # bm25s's, its index built with array operations (generators/tools/bm25_build.py)
        # token ids as the texts are read (bm25s would make a vocabulary, then the ids, in two more
        # passes over the tokens: 0.3 s of 1.8 at 50,000 documents); the ids differ, the scores do not
        # (`tokenize` written out in the loop)
        vocab: dict[str, int] = {}
        find, stop, number = TOKEN_PATTERN.findall, self.stopwords, vocab.setdefault
        ids = [[number(t, len(vocab)) for t in find(x.lower()) if t not in stop] for x in texts]
        self.indexed = bool(vocab)  # (bm25s cannot index a corpus without a single token: nothing scores)
        if self.indexed:
            self.retriever.index((ids, vocab), show_progress=False)

    @property
    def fingerprint(self) -> str:
        """A hash of what the index answers from: its texts in order, the stopwords, bm25s's version."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint_of(self._texts, self._stopword_list)
        return self._fingerprint

    def tokenize(self, text: str) -> list[str]:
        """bm25s's tokens of `text` (module docstring)."""
        stop = self.stopwords
        return [t for t in TOKEN_PATTERN.findall(text.lower()) if t not in stop]

    def tokens(self, text: str) -> list[str]:
        """`tokenize`, remembered for the texts asked often (queries, sentences)."""
        toks = self._tokens.get(text)
        if toks is None:
            if len(self._tokens) > 100_000:
                self._tokens.clear()
            toks = self._tokens[text] = self.tokenize(text)
        return toks

    def _ids(self, query: str) -> list[int]:
        if not query or not self.indexed:
            return []
        vocab = self.retriever.vocab_dict
        return [vocab[t] for t in self.tokens(query) if t and t in vocab]

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document (index order) for `query`, as bm25s computes it."""
        ids = self._ids(query)
        if not ids:
            return np.zeros(self.size, dtype=np.float32)
        return self.retriever.get_scores_from_ids(ids)

    def score(self, query: str) -> Scored:
        """The documents `query` scores above zero, with bm25s's scores."""
        ids = self._ids(query)
        if not ids:
            return EMPTY
        if self.retriever.nonoccurrence_array is None:  # (BM25L and BM25+ score every document)
            if self._starts is None:
                self._starts = self.retriever.scores["indptr"].tolist()
            starts = self._starts
            if sum(starts[t + 1] - starts[t] for t in ids) <= SMALL:
                return self._score_small(ids)
        dense = self.retriever.get_scores_from_ids(ids)  # one vectorised pass over the corpus
        docs = np.flatnonzero(dense > 0)
        scores = dense[docs]
        docs.flags.writeable = scores.flags.writeable = False  # (shared by the callers of `score_many`)
        return Scored(docs, scores)

    def _score_small(self, ids: list[int]) -> Scored:
        """`score` of a query with few postings, added up in Python (module docstring): a sum of
        two float32 numbers made in float64 and rounded to float32 is their float32 sum."""
        data, indices, starts = self.retriever.scores["data"], self.retriever.scores["indices"], self._starts
        total: dict[int, float] = {}
        for t in ids:  # (token by token, as bm25s adds them)
            a, b = starts[t], starts[t + 1]
            for d, v in zip(indices[a:b].tolist(), data[a:b].tolist()):
                before = total.get(d)
                total[d] = v if before is None else float(np.float32(before + v))
        docs = sorted(d for d, v in total.items() if v > 0)
        out = Scored(np.array(docs, dtype=np.int64), np.array([total[d] for d in docs], dtype=np.float32))
        out.docs.flags.writeable = out.scores.flags.writeable = False
        return out

    def score_many(self, queries: Iterable[str]) -> list[Scored]:
        """`score` for each query; a query repeated in the batch, or asked by one of the last
        RECENT queries, is scored once (a trajectory asks a lookup again with another tool or
        mode: 15% of template synthesis's searches)."""
        done, out = self._recent, []
        for q in queries:
            s = done.get(q)
            if s is None:
                if len(done) >= RECENT:
                    done.popitem(last=False)
                s = done[q] = self.score(q)
            else:
                done.move_to_end(q)
            out.append(s)
        return out

    @staticmethod
    def top(scored: Scored, mask: np.ndarray, exclude: Iterable[int], m: int) -> list[int]:
        """Up to `m` document indices with a positive score inside `mask`, not in `exclude`,
        best first; ties broken by index (as the simulator has always ranked)."""
        if m <= 0 or not len(scored.docs):
            return []
        if len(scored.docs) <= SMALL:  # (most queries: sorting in Python costs less than numpy's calls)
            ex = set(exclude)
            ranked = sorted((-s, d) for d, s in zip(scored.docs.tolist(), scored.scores.tolist())
                            if d not in ex and mask[d])
            return [d for _, d in ranked[:m]]
        keep = mask[scored.docs]
        ex = np.fromiter(exclude, dtype=np.int64)
        if len(ex):  # (docs are ascending: find the excluded ones by bisection)
            pos = np.searchsorted(scored.docs, ex)
            inside = pos < len(scored.docs)
            pos = pos[inside]
            keep[pos[scored.docs[pos] == ex[inside]]] = False
        docs, s = scored.docs[keep], scored.scores[keep]
        if len(docs) > m:  # only the best m and their ties need sorting
            cut = np.partition(s, len(s) - m)[len(s) - m]
            docs, s = docs[s >= cut], s[s >= cut]
        order = np.lexsort((docs, -s))[:m]
        return [int(i) for i in docs[order]]

"""Retrievers the tool simulator searches with: one protocol, one registry entry per kind.

A retriever indexes a corpus's passages (title + text, one per document, in doc-id order) and
gives, for a batch of queries, each query's candidate documents with their scores (`Scored`,
generators/tools/retrieval.py); the simulator ranks them inside a tool's domain. Kinds
(`--retriever`):

| kind | part | candidates of a query |
|---|---|---|
| `bm25` (default) | `retrieval.BM25Index` (bm25s) | every document sharing a word with it |
| `dense` | `dense.DenseIndex` (the MiniLM sentence encoder, exact inner products) | its best `depth` |
| `hybrid` | `hybrid.HybridIndex` (reciprocal-rank fusion of bm25 and dense) | the union of both lists |
| `http://host:port/retrieve` | `remote.RemoteRetriever` (Search-R1's retrieval API) | the server's top `depth` |

Every retriever has a `name` (its kind, or the server's URL), a `fingerprint` (a hash of what
its answers depend on: corpus, model, settings; "" when a server does not say) and
`score_many(queries) -> [Scored]`, one call per batch. A retriever that cannot answer (a
server gone) raises `RetrieverError`, which stops the stage with one line.

    corpus = Corpus.of(documents)
    r = build("hybrid", corpus)                      # cached per (spec, corpus) in the process
    top_k(r, ["Ada Lovelace birthplace"], k=5)       # [[(doc index, score), ...]] best first
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Protocol, Sequence

from generators.tools.passages import Corpus, RetrieverError, text_hash

__all__ = ["Corpus", "RetrieverError", "Retriever", "RETRIEVERS", "build", "check_spec", "check_reachable", "kind_of",
           "option", "best", "best_scored", "ranked_ids", "register", "text_hash", "top_k"]

if TYPE_CHECKING:  # (the command line builds its options from this module: bm25s loads only to search)
    import numpy as np

    from generators.tools.retrieval import Scored

DEFAULT = "bm25"
DEPTH = 100  # candidates per query of the dense, hybrid and http retrievers
HELP = ("how the simulated search tools search: bm25 (default), dense (the MiniLM sentence encoder), hybrid "
        "(reciprocal-rank fusion of both) or http://host:port/retrieve (a server speaking Search-R1's retrieval "
        "API, e.g. `forgeplay serve-retriever`)")


class Retriever(Protocol):
    name: str
    fingerprint: str

    def score_many(self, queries: Iterable[str]) -> "list[Scored]":
        """Each query's candidate documents (indices ascending) with their scores, higher = better."""


def kind_of(spec: str) -> str:
    """The registry kind of a `--retriever` value (a URL is the `http` kind)."""
    return "http" if spec.startswith(("http://", "https://")) else spec


def check_spec(spec: str) -> str:
    """`spec` if it names a retriever, else ValueError in one line (before anything loads)."""
    kind = kind_of(spec or "")
    if kind not in RETRIEVERS:
        raise ValueError(f"--retriever must be one of {', '.join(k for k in RETRIEVERS if k != 'http')} "
                         f"or http://host:port/retrieve, not {spec!r}")
    if kind == "http":
        from urllib.parse import urlparse

        u = urlparse(spec)
        if not u.hostname or not u.port:
            raise ValueError(f"--retriever {spec!r}: give the server as http://host:port/retrieve")
    return spec


def index_dir(root) -> Path:
    """Where indexes built from a data root's datasets are kept (bm25's arrays and dense
    embeddings, by fingerprint)."""
    from storage.manifest import resolve_root

    return Path(resolve_root(root)) / "_index"


Factory = Callable[[str, Corpus, dict], Retriever]  # (spec, corpus, options: stopwords, index_dir, depth)
RETRIEVERS: dict[str, Factory] = {}
_BUILT: dict[tuple, Retriever] = {}


def register(kind: str, factory: Factory) -> None:
    RETRIEVERS[kind] = factory


def build(spec: str, corpus: Corpus, stopwords: str = "en", index_dir: str | Path | None = None,
          depth: int = DEPTH) -> Retriever:
    """The retriever `spec` over `corpus`. bm25 is made each time, read from `index_dir`
    when a command kept it there before (generators/tools/bm25_saved.py); the others are kept
    per (spec, corpus, options) in the process, so simulators of several seeds share one index."""
    check_spec(spec)
    opts = {"stopwords": stopwords, "index_dir": index_dir, "depth": depth}
    if spec == DEFAULT:
        return RETRIEVERS[DEFAULT](spec, corpus, opts)
    key = (spec, corpus.fingerprint, stopwords, str(index_dir), depth)
    got = _BUILT.get(key)
    if got is None:
        if len(_BUILT) >= 4:
            _BUILT.clear()
        got = _BUILT[key] = RETRIEVERS[kind_of(spec)](spec, corpus, opts)
    return got


def best(scored: "Scored", k: int) -> list[int]:
    """The best `k` candidates of `scored` (document indices), best first, ties by index."""
    import numpy as np

    from generators.tools.retrieval import BM25Index

    if not len(scored.docs):
        return []
    return BM25Index.top(scored, np.ones(int(scored.docs[-1]) + 1, dtype=bool), (), k)  # (docs ascend)


def best_scored(scored: "Scored", k: int) -> tuple[list[int], "np.ndarray"]:
    """`best` and the scores of those candidates (float32, in the same order)."""
    import numpy as np

    docs = best(scored, k)
    return docs, scored.scores[np.searchsorted(scored.docs, docs)]


def top_k(retriever: Retriever, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
    """Each query's best `k` documents as (index, score), best first, ties by index."""
    out = []
    for s in retriever.score_many(queries):
        docs, scores = best_scored(s, k)
        out.append(list(zip(docs, scores.tolist())))
    return out


def ranked_ids(scored: "Scored", doc_ids: Sequence[str], k: int = 20) -> str:
    """A hash of a query's best `k` candidates, in rank order (what a call's replay compares to
    tell a changed index from a changed record)."""
    return text_hash([doc_ids[i] for i in best(scored, k)])


def _bm25(spec: str, corpus: Corpus, opts: dict) -> Retriever:
    from generators.tools.bm25_saved import load_or_build

    return load_or_build(corpus.passages, opts["stopwords"], opts["index_dir"])


def _dense(spec: str, corpus: Corpus, opts: dict) -> Retriever:
    from generators.tools.dense import DenseIndex

    return DenseIndex(corpus.passages, depth=opts["depth"], index_dir=opts["index_dir"])


def _hybrid(spec: str, corpus: Corpus, opts: dict) -> Retriever:
    from generators.tools.hybrid import HybridIndex

    return HybridIndex(_bm25(spec, corpus, opts), _dense(spec, corpus, opts), depth=opts["depth"])


def _http(spec: str, corpus: Corpus, opts: dict) -> Retriever:
    from generators.tools.remote import RemoteRetriever

    return RemoteRetriever(spec, corpus, depth=opts["depth"])


register("bm25", _bm25)
register("dense", _dense)
register("hybrid", _hybrid)
register("http", _http)


def option(default: str = DEFAULT):
    """The `--retriever` field of a command's config (the same name, help and default everywhere)."""
    from dataclasses import field

    return field(default=default, metadata={"help": HELP})


def check_reachable(spec: str) -> None:
    """For a server: one small request now, so a server that is not there is one line
    (RetrieverError) before anything loads; nothing for an in-process retriever."""
    if kind_of(spec) == "http":
        from generators.tools.remote import ping

        ping(spec)

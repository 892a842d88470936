"""Benchmark the simulator's retrievers (bm25, dense, hybrid, a retrieval server) on the world.

    .venv/bin/python benchmarks/bench_retrieval.py [--entities 50000] [--queries 256] [--recall 600]

Builds the fictional world at `--entities` documents (one passage each) and times, on its
questions, in batches of 64 (how replay asks), top-5 retrieval of:
- `bm25` against bm25s's own `tokenize` + `retrieve` on the same index;
- `dense` against the bare encoder (one forward pass per query, as the index encodes them so
  answers do not depend on the batch) plus a float32 matrix product and a top-5 partition; the
  batched encoder (one forward pass for the 64, not batch-invariant) is shown as a floor;
- `hybrid` against bm25s + the bare dense path + the same fusion written plainly;
- the HTTP retriever (`forgeplay serve-retriever` in its own process, bm25) against the
  in-process bm25 at batch 1 and 64: milliseconds per query and the overhead.
Then recall@5 of the golden passages of `--recall` world questions for each retriever at the
same k (the mean share of a question's golden passages in its top 5, and the share of
questions with at least one). Dense vectors are kept per index fingerprint in `--index-dir`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bm25s
import numpy as np
from rich.console import Console
from rich.table import Table

from comparisons import record
from generators.corpus.build import WorldConfig, write
from generators.tools.hybrid import K
from generators.tools.retriever import Corpus, build, top_k
from storage import load_table

BATCH = 64


def bare_bm25(index, queries: list[str], k: int) -> list[list[int]]:
    toks = bm25s.tokenize(queries, stopwords="en", show_progress=False)
    docs, _ = index.retriever.retrieve(toks, k=k, show_progress=False, n_threads=0)
    return docs.tolist()


class BareDense:
    """The encoder and a matrix product, nothing else (float32 vectors, not quantized)."""

    def __init__(self, dense):
        self.emb, self.vectors = dense.embedder, dense.vectors / np.float32(4000.0)

    def encode(self, queries: list[str], batched: bool) -> np.ndarray:
        if batched:
            return self.emb.encode_batch(queries)
        return np.stack([self.emb.encode_batch([q])[0] for q in queries])

    def search(self, queries: list[str], k: int, batched: bool = False) -> list[list[int]]:
        s = self.encode(queries, batched) @ self.vectors.T
        part = np.argpartition(-s, k, axis=1)[:, :k]
        return [p[np.argsort(-row[p])].tolist() for p, row in zip(part, s)]


def bare_hybrid(index, dense: BareDense, queries: list[str], k: int, depth: int = 100) -> list[list[int]]:
    b = bare_bm25(index, queries, depth)
    d = dense.search(queries, depth)
    out = []
    for rb, rd in zip(b, d):
        score: dict[int, float] = {}
        for ranked in (rb, rd):
            for r, i in enumerate(ranked, 1):
                score[i] = score.get(i, 0.0) + 1.0 / (K + r)
        out.append(sorted(score, key=lambda i: (-score[i], i))[:k])
    return out


def per_query(fn, queries: list[str], batch: int) -> float:
    """Seconds per query of `fn(batch of queries)` over `queries`."""
    t = time.perf_counter()
    for s in range(0, len(queries), batch):
        fn(queries[s:s + batch])
    return (time.perf_counter() - t) / len(queries)


def forget(r) -> None:
    """Drop a retriever's caches (query vectors, tokens), so each timing does all the work."""
    for part in (r, getattr(r, "bm25", None), getattr(r, "dense", None)):
        for name in ("_queries", "_tokens"):
            if part is not None and hasattr(part, name):
                getattr(part, name).clear()


def paired(ours, bare, queries, batch, repeat, reset) -> tuple[list[float], list[float]]:
    a, b = [], []
    for _ in range(repeat):
        reset()
        a.append(per_query(ours, queries, batch))
        b.append(per_query(bare, queries, batch))
    return a, b


def serve(root: str, retriever: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "--data-root", root, "serve-retriever", "--dataset",
                             "bench", "--retriever", retriever, "--port", "0"], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    for line in proc.stdout:
        if " at http://" in line:
            return proc, line.rsplit(" at ", 1)[1].strip()
    raise RuntimeError("serve-retriever did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entities", type=int, default=50000, help="documents of the world (one passage each)")
    ap.add_argument("--queries", type=int, default=256, help="questions timed per row")
    ap.add_argument("--recall", type=int, default=600, help="questions whose golden passages are looked for")
    ap.add_argument("--repeat", type=int, default=3, help="paired timings per row")
    ap.add_argument("--index-dir", default=os.path.join(tempfile.gettempdir(), "forgeplay-bench-index"),
                    help="where dense vectors are kept between runs (by index fingerprint)")
    args = ap.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory() as root:
        t = time.perf_counter()
        write(WorldConfig(seed=7, entities=args.entities, triples=max(args.recall, args.queries) + 200), root, "bench")
        docs = load_table("bench", "documents", root, columns=["doc_id", "title", "text"]).to_pylist()
        triples = load_table("bench", "triples", root).to_pylist()
        corpus = Corpus.of(docs)
        console.print(f"world: {len(docs):,} passages, {len(triples):,} questions ({time.perf_counter() - t:.0f} s)")
        built = {}
        for spec in ("bm25", "dense", "hybrid"):
            t = time.perf_counter()
            built[spec] = build(spec, corpus, index_dir=args.index_dir)
            console.print(f"{spec} index: {time.perf_counter() - t:.1f} s")
        queries = [t["question"] for t in triples[:args.queries]]
        bm25, dense, hybrid = built["bm25"], built["dense"], built["hybrid"]
        bare_d = BareDense(dense)
        rows = []

        def row(name, ours, bare, peer, batch=BATCH, reset=lambda: None):
            a, b = paired(ours, bare, queries, batch, args.repeat, reset)
            rows.append((name, statistics.median(a), peer, statistics.median(b)))
            record(name, [1 / x for x in a], peer, [1 / x for x in b], "queries/s", paired=True,
                   setting=f"{len(docs):,} passages, batch {batch}")

        row("bm25", lambda q: top_k(bm25, q, 5), lambda q: bare_bm25(bm25, q, 5), "bm25s tokenize + retrieve",
            reset=lambda: forget(bm25))
        row("dense", lambda q: top_k(dense, q, 5), lambda q: bare_d.search(q, 5), "encoder per query + matmul",
            reset=lambda: forget(dense))
        row("dense", lambda q: top_k(dense, q, 5), lambda q: bare_d.search(q, 5, batched=True),
            "batched encoder + matmul (floor)", reset=lambda: forget(dense))
        row("hybrid", lambda q: top_k(hybrid, q, 5), lambda q: bare_hybrid(bm25, bare_d, q, 5),
            "bm25s + encoder + matmul + fusion", reset=lambda: forget(hybrid))
        proc, url = serve(root, "bm25")
        try:
            remote = build(url, corpus)
            for batch in (1, BATCH):
                row("http (serve-retriever, bm25)", lambda q: top_k(remote, q, 5), lambda q: top_k(bm25, q, 5),
                    "bm25 in process", batch=batch, reset=lambda: forget(bm25))
        finally:
            proc.terminate()
            proc.wait()
        table = Table(title=f"retrieval on {len(docs):,} passages, top 5 (paired medians of {args.repeat})")
        for c in ("retriever", "ms/query", "queries/s", "peer", "peer ms/query", "x peer (time)"):
            table.add_column(c, justify="left" if c in ("retriever", "peer") else "right")
        for name, ours, peer, bare in rows:
            table.add_row(name, f"{ours * 1000:.2f}", f"{1 / ours:,.0f}", peer, f"{bare * 1000:.2f}", f"{ours / bare:.2f}")
        console.print(table)

        golden = [t for t in triples if t.get("golden_doc_ids")][:args.recall]
        index_of = {d: i for i, d in enumerate(corpus.doc_ids)}
        rec = Table(title=f"recall@5 of golden passages, {len(golden)} world questions")
        for c in ("retriever", "recall@5", "hit@5 (any golden)"):
            rec.add_column(c, justify="left" if c == "retriever" else "right")
        recall = {}
        for spec, r in built.items():
            forget(r)
            hits = top_k(r, [t["question"] for t in golden], 5)
            share = [len({i for i, _ in h} & {index_of[g] for g in t["golden_doc_ids"]}) / len(t["golden_doc_ids"])
                     for h, t in zip(hits, golden)]
            recall[spec] = float(np.mean(share))
            rec.add_row(spec, f"{recall[spec]:.3f}", f"{np.mean([s > 0 for s in share]):.3f}")
        for spec in ("dense", "hybrid"):
            record(f"{spec} recall@5", recall[spec], "bm25 recall@5", recall["bm25"], "recall",
                   setting=f"{len(golden)} world questions, {len(docs):,} passages")
        console.print(rec)


if __name__ == "__main__":
    main()

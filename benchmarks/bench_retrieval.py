"""Benchmark the simulator's retrievers (bm25, dense, hybrid, a retrieval server) on the world.

    .venv/bin/python benchmarks/bench_retrieval.py [--entities 50000] [--dense-entities N] [--recall 600]

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
questions with at least one). Dense vectors are kept per index fingerprint in `--index-dir`;
`--dense-entities` runs the dense and hybrid rows (and recall of all three) on a smaller world
where encoding every passage is too slow for the machine.
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


def world(root: str, name: str, entities: int, triples: int) -> tuple[Corpus, list[dict]]:
    write(WorldConfig(seed=7, entities=entities, triples=triples), root, name)
    docs = load_table(name, "documents", root, columns=["doc_id", "title", "text"]).to_pylist()
    return Corpus.of(docs), load_table(name, "triples", root).to_pylist()


def recall_at(r, corpus: Corpus, golden: list[dict], k: int = 5) -> tuple[float, float]:
    """(mean share of a question's golden passages in its top k, share of questions with one)."""
    forget(r)
    index_of = {d: i for i, d in enumerate(corpus.doc_ids)}
    hits = top_k(r, [t["question"] for t in golden], k)
    share = [len({i for i, _ in h} & {index_of[g] for g in t["golden_doc_ids"]}) / len(t["golden_doc_ids"])
             for h, t in zip(hits, golden)]
    return float(np.mean(share)), float(np.mean([s > 0 for s in share]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entities", type=int, default=50000, help="documents of the world (one passage each)")
    ap.add_argument("--dense-entities", type=int, default=None,
                    help="documents of the world the dense and hybrid rows and recall use (default: --entities; "
                         "encoding passages costs ~0.1 s each on a loaded 2-core machine)")
    ap.add_argument("--queries", type=int, default=256, help="questions timed per bm25 and http row")
    ap.add_argument("--dense-queries", type=int, default=64, help="questions timed per dense and hybrid row")
    ap.add_argument("--recall", type=int, default=600, help="questions whose golden passages are looked for")
    ap.add_argument("--repeat", type=int, default=3, help="paired timings per row")
    ap.add_argument("--index-dir", default=os.path.join(tempfile.gettempdir(), "forgeplay-bench-index"),
                    help="where dense vectors are kept between runs (by index fingerprint)")
    args = ap.parse_args()
    console = Console()
    n_dense = args.dense_entities or args.entities
    rows, recalls = [], []

    def row(name, ours, bare, peer, queries, size, batch=BATCH, reset=lambda: None):
        a, b = paired(ours, bare, queries, batch, args.repeat, reset)
        rows.append((name, size, batch, statistics.median(a), peer, statistics.median(b)))
        record(name, [1 / x for x in a], peer, [1 / x for x in b], "queries/s", paired=True,
               setting=f"{size:,} passages, batch {batch}")

    with tempfile.TemporaryDirectory() as root:
        t = time.perf_counter()
        corpus, triples = world(root, "bench", args.entities, max(args.recall, args.queries) + 200)
        console.print(f"world: {len(corpus.doc_ids):,} passages, {len(triples):,} questions "
                      f"({time.perf_counter() - t:.0f} s)")
        t = time.perf_counter()
        bm25 = build("bm25", corpus)
        console.print(f"bm25 index: {time.perf_counter() - t:.1f} s")
        queries = [t["question"] for t in triples[:args.queries]]
        golden = [t for t in triples if t.get("golden_doc_ids")][:args.recall]
        size = len(corpus.doc_ids)
        row("bm25", lambda q: top_k(bm25, q, 5), lambda q: bare_bm25(bm25, q, 5), "bm25s tokenize + retrieve",
            queries, size, reset=lambda: forget(bm25))
        proc, url = serve(root, "bm25")
        try:
            remote = build(url, corpus)
            for batch in (1, BATCH):
                row("http (serve-retriever, bm25)", lambda q: top_k(remote, q, 5), lambda q: top_k(bm25, q, 5),
                    "bm25 in process", queries, size, batch=batch, reset=lambda: forget(bm25))
        finally:
            proc.terminate()
            proc.wait()
        recalls.append(("bm25", size, len(golden), *recall_at(bm25, corpus, golden)))

        if n_dense != args.entities:
            corpus, triples = world(root, "dense", n_dense, max(args.recall, args.dense_queries) + 200)
            bm25 = build("bm25", corpus)
            golden = [t for t in triples if t.get("golden_doc_ids")][:args.recall]
        size = len(corpus.doc_ids)
        t = time.perf_counter()
        dense = build("dense", corpus, index_dir=args.index_dir)
        hybrid = build("hybrid", corpus, index_dir=args.index_dir)
        console.print(f"dense index over {size:,} passages: {time.perf_counter() - t:.0f} s (or read from --index-dir)")
        queries = [t["question"] for t in triples[:args.dense_queries]]
        bare_d = BareDense(dense)
        row("dense", lambda q: top_k(dense, q, 5), lambda q: bare_d.search(q, 5), "encoder per query + matmul",
            queries, size, reset=lambda: forget(dense))
        row("dense", lambda q: top_k(dense, q, 5), lambda q: bare_d.search(q, 5, batched=True),
            "batched encoder + matmul (floor)", queries, size, reset=lambda: forget(dense))
        row("hybrid", lambda q: top_k(hybrid, q, 5), lambda q: bare_hybrid(bm25, bare_d, q, 5),
            "bm25s + encoder + matmul + fusion", queries, size, reset=lambda: forget(hybrid))
        for spec, r in (("bm25", bm25), ("dense", dense), ("hybrid", hybrid)):
            recalls.append((spec, size, len(golden), *recall_at(r, corpus, golden)))

    table = Table(title=f"top-5 retrieval, batches of {BATCH} unless said (paired medians of {args.repeat})")
    for c in ("retriever", "passages", "batch", "ms/query", "queries/s", "peer", "peer ms/query", "x peer (time)"):
        table.add_column(c, justify="left" if c in ("retriever", "peer") else "right")
    for name, n, batch, ours, peer, bare in rows:
        table.add_row(name, f"{n:,}", str(batch), f"{ours * 1000:.2f}", f"{1 / ours:,.1f}", peer,
                      f"{bare * 1000:.2f}", f"{ours / bare:.2f}")
    console.print(table)
    rec = Table(title="recall@5 of the golden passages of world questions")
    for c in ("retriever", "passages", "questions", "recall@5", "hit@5 (any golden)"):
        rec.add_column(c, justify="left" if c == "retriever" else "right")
    for spec, n, q, r, h in recalls:
        rec.add_row(spec, f"{n:,}", str(q), f"{r:.3f}", f"{h:.3f}")
    console.print(rec)
    base = {n: r for spec, n, _, r, _ in recalls if spec == "bm25"}
    for spec, n, q, r, _ in recalls:
        if spec != "bm25":
            record(f"{spec} recall@5", r, "bm25 recall@5", base[n], "recall", setting=f"{q} world questions, {n:,} passages")


if __name__ == "__main__":
    main()

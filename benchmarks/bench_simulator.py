"""Benchmark of the BM25 tool simulator: index build time and per-call latency.

    .venv/bin/python benchmarks/bench_simulator.py [--docs 10000] [--calls 300]

Builds a synthetic corpus (random words from a fixed vocabulary, six entity types plus
untyped documents), then times Simulator construction, `call` in each mode, plain `search`,
and, as the peer, bm25s's own `retrieve` (top-k with a domain weight mask) on the same
index. Prints a table with the per-call time and the ratio to the peer.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from comparisons import record
from generators.tools.simulator import Simulator

TYPES = ["person", "place", "organisation", "work", "event", "science", None]


def corpus(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(20000)]
    names = [f"name{i}" for i in range(n)]
    docs = []
    for i in range(n):
        sents = [" ".join(rng.choices(vocab, k=rng.randint(6, 14))).capitalize() + "." for _ in range(rng.randint(3, 7))]
        t = TYPES[i % len(TYPES)]
        docs.append({"doc_id": f"d{i:06d}", "title": names[i], "text": f"{names[i]} is known. " + " ".join(sents),
                     "source": "bench", "meta": json.dumps({"entity_type": t}) if t else None})
    return docs


def timeit(fn, reps: int) -> float:
    t = time.perf_counter()
    for i in range(reps):
        fn(i)
    return (time.perf_counter() - t) / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=10000, help="number of synthetic documents")
    ap.add_argument("--calls", type=int, default=300, help="calls timed per row")
    args = ap.parse_args()
    docs = corpus(args.docs)
    t = time.perf_counter()
    sim = Simulator(docs, seed=1)
    build = time.perf_counter() - t
    rng = random.Random(3)
    queries = [f"name{rng.randrange(args.docs)} " + " ".join(f"w{rng.randrange(20000)}" for _ in range(4))
               for _ in range(args.calls)]
    golden = [[f"d{rng.randrange(args.docs):06d}"] for _ in range(args.calls)]

    peer_tokens = sim._tokenize(queries)
    mask = sim.masks["person"].astype(np.float32)

    def peer(i):
        ids = sim.retriever.get_tokens_ids(peer_tokens[i])
        sim.retriever.retrieve([ids], k=5, weight_mask=mask, show_progress=False, n_threads=0)

    peer_s = timeit(peer, args.calls)
    rows = [("bm25s retrieve (peer, person mask)", peer_s)]
    rows.append(("search(query, k=5, domain=person)", timeit(lambda i: sim.search(queries[i], 5, "person"), args.calls)))
    for mode in ("good", "bad", "insufficient"):
        rows.append((f"call general_search mode={mode}",
                     timeit(lambda i: sim.call("general_search", {"query": queries[i]}, golden_doc_ids=golden[i],
                                               mode=mode, answers=["w1"]), args.calls)))
    rows.append(("call with invalid arguments",
                 timeit(lambda i: sim.call("search_person", {"query": queries[i], "top_k": 99}), args.calls)))

    table = Table(title=f"Simulator on {args.docs} documents (index build {build:.2f} s)")
    for c in ("operation", "ms / call", "x peer"):
        table.add_column(c, justify="right" if c != "operation" else "left")
    for name, s in rows:
        table.add_row(name, f"{s * 1000:.3f}", f"{s / peer_s:.2f}")
    Console().print(table)
    for name, s in rows[1:]:
        record(name, s * 1000, "bm25s retrieve", peer_s * 1000, "ms/call", better="lower",
               setting=f"{args.docs} docs")


if __name__ == "__main__":
    main()

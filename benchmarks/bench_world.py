"""Benchmark the world corpus generator and the fact extractor.

    .venv/bin/python benchmarks/bench_world.py [--sizes 2000,10000,50000]

Prints one table row per world size: seconds to build without and with answer
verification (the derivation check of every triple), seconds to commit the shards, and
the ratio verify/no-verify. A second table compares the extractor's anchor-word index
with trying every template on every sentence (the peer), on the same documents.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from rich.console import Console
from rich.table import Table

from comparisons import record
from generators.corpus.build import WorldConfig, generate, write
from generators.corpus.derive import EXTRACTOR, split_sentences


def _time(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def brute_force(sentences: list[str]) -> int:
    return sum(1 for s in sentences for t in EXTRACTOR.templates if t.compiled[0].match(s))


def indexed(sentences: list[str]) -> int:
    return sum(len(EXTRACTOR.matches(s)) for s in sentences)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2000,10000,50000", help="Comma-separated entity counts.")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]

    table = Table(title="world generator (seconds)")
    for c in ("entities", "triples", "build", "build+verify", "verify/build", "write shards", "docs/s end to end"):
        table.add_column(c, justify="right")
    corpus = None
    for n in sizes:
        t_plain, _ = _time(lambda: generate(WorldConfig(seed=args.seed, entities=n, verify=False)))
        t_verify, corpus_n = _time(lambda: generate(WorldConfig(seed=args.seed, entities=n)))
        with tempfile.TemporaryDirectory() as tmp:
            t_all, _ = _time(lambda: write(WorldConfig(seed=args.seed, entities=n), tmp, "bench"))
        corpus = corpus or corpus_n
        table.add_row(str(n), str(len(corpus_n.triple_rows)), f"{t_plain:.2f}", f"{t_verify:.2f}",
                      f"{t_verify / t_plain:.2f}x", f"{t_all - t_verify:.2f}", f"{n / t_all:,.0f}")
        record("build + answer verification", t_verify, "build alone", t_plain, "s", better="lower",
               setting=f"{n} entities")
    Console().print(table)

    sentences = [s for r in corpus.document_rows for s in split_sentences(r["text"])]
    t_idx, n_idx = _time(lambda: indexed(sentences))
    t_bf, n_bf = _time(lambda: brute_force(sentences))
    assert n_idx == n_bf, "the index must find the same matches"
    ex = Table(title=f"fact extraction over {len(sentences):,} sentences ({sizes[0]} entities)")
    for c in ("method", "seconds", "sentences/s", "speed-up"):
        ex.add_column(c, justify="right")
    ex.add_row("every template (peer)", f"{t_bf:.2f}", f"{len(sentences) / t_bf:,.0f}", "1.00x")
    ex.add_row("anchor-word index", f"{t_idx:.2f}", f"{len(sentences) / t_idx:,.0f}", f"{t_bf / t_idx:.2f}x")
    Console().print(ex)
    record("anchor-word index", len(sentences) / t_idx, "every template", len(sentences) / t_bf, "sentences/s",
           setting=f"{len(sentences):,} sentences")


if __name__ == "__main__":
    main()

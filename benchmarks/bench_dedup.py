"""Dedup index benchmark: the memory and time of the dedup layer's index (validators/dedup.py)
as a run of N trajectories fills it, K trajectories per question (one triple each, every
conversation its own), each size in a process of its own. Questions are 14 words drawn from
5,000 and an answer; the conversations' hashes are 64-bit numbers, as DuckDB gives them. The
memory is the process's RSS after the run minus before it, per question and in all; the time
is per trajectory checked. `--before` measures the index before its keys were 64-bit numbers
in KeyTables (tests/validators/dedup_before.py), as a second row.

    python benchmarks/bench_dedup.py --sizes 100000,1000000 --per-question 4 --before --out results.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fill(n: int, per_question: int, before: bool) -> dict:
    """Fill one index with n trajectories; its figures."""
    import psutil

    sys.path.insert(0, str(ROOT))
    if before:
        from tests.validators.dedup_before import Deduper
    else:
        from validators.dedup import Deduper
    rng = random.Random(1)
    words = [f"w{i}" for i in range(5000)]
    proc = psutil.Process()
    d = Deduper()
    rss0, t0, passed = proc.memory_info().rss, time.perf_counter(), 0
    for i in range(0, n, per_question):
        question = " ".join(rng.choice(words) for _ in range(14)) + " || " + rng.choice(words)
        triple = f"triple-{i:09d}"
        for k in range(min(per_question, n - i)):
            body = rng.getrandbits(64)
            passed += d.check(f"synth-{i + k:09d}-{rng.getrandbits(48):012x}", question, triple,
                              f"duckdb:{body}" if before else body).passed
    seconds = time.perf_counter() - t0
    questions = -(-n // per_question)
    grown = proc.memory_info().rss - rss0
    return {"n": n, "questions": questions, "passed": passed, "mib": grown / 2**20,
            "bytes_per_question": grown / questions, "us_per_record": seconds / n * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000", help="comma list of trajectory counts")
    ap.add_argument("--per-question", type=int, default=4, help="trajectories per question (one triple)")
    ap.add_argument("--before", action="store_true", help="also measure the index before KeyTables")
    ap.add_argument("--out", default=None, help="also write the table, command and date to this Markdown file")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # n,before: fill in this process, print JSON
    args = ap.parse_args()
    if args.one:
        n, before = args.one.split(",")
        print(json.dumps(fill(int(n), args.per_question, before == "1")))
        return
    rows = []
    for before in ([False, True] if args.before else [False]):
        for n in (int(s) for s in args.sizes.split(",")):
            out = subprocess.run([sys.executable, __file__, "--one", f"{n},{int(before)}", "--per-question",
                                  str(args.per_question)], capture_output=True, text=True, check=True).stdout
            rows.append({"index": "before (dicts)" if before else "KeyTables", **json.loads(out.splitlines()[-1])})
            print(rows[-1], flush=True)
    lines = ["| index | trajectories | questions | passed | index MiB | bytes a question | us a trajectory |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['index']} | {r['n']:,} | {r['questions']:,} | {r['passed']:,} | {r['mib']:,.0f} | "
              f"{r['bytes_per_question']:,.0f} | {r['us_per_record']:.1f} |" for r in rows]
    print("\n".join(lines))
    if args.out:
        cmd = "python benchmarks/bench_dedup.py " + " ".join(sys.argv[1:])
        Path(args.out).write_text(f"# Dedup index\n\n`{cmd}` ({dt.date.today()})\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""Commit-per-chunk benchmark: a run that commits one small shard per chunk (as synthesis
commits 32 trajectories at a time, a writer opened per chunk), as its shard count grows.

- commit time per chunk near the start of the run and after --shards shards (automatic
  compaction off): the same when a commit does not grow with the shard count;
- the same chunk's commit against its floor, a raw `pq.write_table` of the rows (+ fsync);
- the whole run's commits with automatic compaction on (storage/compact.py) against off:
  what compaction costs, amortised, and how many shards the run keeps;
- `SELECT count(*)` through the catalog over the run's many shards, after `forgeplay compact`,
  and DuckDB reading the same files directly (the floor).

    python benchmarks/bench_commits.py --shards 3000
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from comparisons import record
from storage import Catalog, ShardWriter, manifest
from storage.compact import AUTO_ENV, compact
from storage.samples import SAMPLES
from storage.schema import load


def chunk(i0: int, n: int) -> list[dict]:
    base = SAMPLES["trajectories"]
    return [dict(base, traj_id=f"t{i}", answer=f"answer {i}", question=f"question {i}") for i in range(i0, i0 + n)]


def run(root: Path, shards: int, rows: int, probe: int, auto: bool) -> dict:
    """Commit `shards` chunks of `rows` rows, a writer per chunk; time the `probe` chunks
    after 100 shards and the last `probe` ones, and the whole run."""
    os.environ[AUTO_ENV] = "" if auto else "0"
    early, late, total = [], [], time.perf_counter()
    for s in range(shards):
        t = time.perf_counter()
        with ShardWriter(root, "bench", "trajectories", "r1") as w:
            w.write(chunk(s * rows, rows))
        t = time.perf_counter() - t
        if 100 <= s < 100 + probe:
            early.append(t)
        elif s >= shards - probe:
            late.append(t)
    return {"early": early, "late": late, "total": time.perf_counter() - total,
            "shards": len(manifest.read(root / "bench"))}


def raw_writes(folder: Path, rows: int, n: int) -> list[float]:
    """The floor of one commit: the same rows as a table, written with pq.write_table and fsynced."""
    schema = load("trajectories")
    from storage.shards import stamp

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        t = time.perf_counter()
        table = pa.Table.from_pylist(stamp(chunk(i * rows, rows), schema, "r1"), schema=schema.arrow)
        with open(folder / f"{i}.parquet", "wb") as f:
            pq.write_table(table, f, compression="zstd")
            os.fsync(f.fileno())
        out.append(time.perf_counter() - t)
    return out


def count_times(root: Path, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        with Catalog(root) as cat:
            cat.scalar("SELECT count(*) FROM bench_trajectories")
        out.append(time.perf_counter() - t)
    return out


def direct_times(root: Path, repeat: int) -> list[float]:
    files = [str(e.abspath(root / "bench")) for e in manifest.read(root / "bench")]
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        con = duckdb.connect()
        con.execute("SELECT count(*) FROM read_parquet(?)", [files]).fetchone()
        con.close()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=3000, help="chunks committed in the run")
    ap.add_argument("--rows", type=int, default=32, help="rows per chunk")
    ap.add_argument("--probe", type=int, default=30, help="chunks timed at each end")
    ap.add_argument("--repeat", type=int, default=5, help="repetitions of each query")
    ap.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temp dir)")
    args = ap.parse_args()
    if args.shards < 100 + 2 * args.probe:
        ap.error(f"--shards must be at least {100 + 2 * args.probe}")
    scratch = Path(tempfile.mkdtemp(dir=args.dir))
    try:
        off = run(scratch / "off", args.shards, args.rows, args.probe, auto=False)
        raw = raw_writes(scratch / "raw", args.rows, args.probe)
        on = run(scratch / "on", args.shards, args.rows, args.probe, auto=True)
        many = count_times(scratch / "off", args.repeat)
        direct_many = direct_times(scratch / "off", args.repeat)
        t = time.perf_counter()
        compact(scratch / "off", "bench")
        compact_s = time.perf_counter() - t
        few = count_times(scratch / "off", args.repeat)
        direct_few = direct_times(scratch / "off", args.repeat)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    ms = lambda v: 1000 * statistics.median(v)  # noqa: E731
    print(f"\n{args.shards} commits of {args.rows} trajectories, a writer per chunk")
    print(f"commit per chunk, after 100 shards:        {ms(off['early']):8.1f} ms")
    print(f"commit per chunk, after {args.shards - args.probe} shards:       {ms(off['late']):8.1f} ms")
    print(f"raw pq.write_table + fsync of the chunk:   {ms(raw):8.1f} ms")
    print(f"whole run, automatic compaction off / on:  {off['total']:8.1f} s / {on['total']:.1f} s "
          f"({off['shards']} / {on['shards']} shards kept)")
    print(f"count(*) via the catalog over {off['shards']} shards: {ms(many):8.1f} ms (DuckDB direct {ms(direct_many):.1f} ms)")
    print(f"forgeplay compact: {compact_s:.1f} s; then count(*) via the catalog: {ms(few):.1f} ms "
          f"(DuckDB direct {ms(direct_few):.1f} ms)")
    setting = f"{args.shards:,} chunks of {args.rows} trajectories"
    record(f"commit after {args.shards - args.probe} shards", off["late"], "commit after 100 shards", off["early"],
           "s", better="lower", setting=setting)
    record("commit of a chunk", off["late"], "raw pq.write_table + fsync", raw, "s", better="lower", setting=setting)
    record("run with automatic compaction", [on["total"]], "run without", [off["total"]], "s", better="lower",
           setting=setting)
    record(f"catalog count(*) over {off['shards']} shards", many, "DuckDB direct", direct_many, "s",
           better="lower", setting=setting)
    record("catalog count(*) after forgeplay compact", few, "DuckDB direct", direct_few, "s", better="lower",
           setting=setting)


if __name__ == "__main__":
    main()

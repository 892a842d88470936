"""Storage benchmark: the commit protocol (validate, temp file, fsync, rename, sha256,
manifest, id de-duplication) against raw `pyarrow.parquet.write_table`, in the same run,
on trajectory-shaped rows. Prints a table and the ratios.

    python benchmarks/bench_storage.py --rows 1000000
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # repo root, for tests.storage.samples

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from comparisons import record
from storage import ShardWriter, load_table
from storage.schema import load
from storage.shards import stamp


def make_table(n: int, base_rows: int = 5000) -> pa.Table:
    """n trajectory rows: a few thousand distinct rows built once, tiled, with unique ids."""
    from storage.samples import SAMPLES

    s = load("trajectories")
    rows = stamp([dict(SAMPLES["trajectories"], traj_id=f"t{i}", question=f"question {i} " + "word " * (i % 50))
                  for i in range(base_rows)], s, "bench")
    base = pa.Table.from_pylist(rows, schema=s.arrow)
    reps = -(-n // base_rows)
    table = pa.concat_tables([base] * reps).slice(0, n).combine_chunks()
    ids = pc.binary_join_element_wise(pa.array([f"{i:012d}" for i in range(n)]), table.column("id"), "-")
    return table.set_column(0, s.arrow.field("id"), ids)


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows to write and read")
    ap.add_argument("--shard-rows", type=int, default=250_000, help="rows per shard (both sides)")
    ap.add_argument("--row-group", type=int, default=50_000, help="rows per row group (both sides)")
    ap.add_argument("--repeat", type=int, default=4, help="repetitions; the best time is kept")
    ap.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temp dir)")
    args = ap.parse_args()

    table = make_table(args.rows)
    print(f"{table.num_rows:,} rows, {table.nbytes / 1e6:.0f} MB in memory")
    scratch = Path(tempfile.mkdtemp(dir=args.dir))
    results = {"raw write": [], "commit write": [], "raw read": [], "manifest read": []}
    try:
        for r in range(args.repeat):
            raw_dir, root = scratch / f"raw{r}", scratch / f"root{r}"
            raw_dir.mkdir()

            def raw_write():
                for i, start in enumerate(range(0, table.num_rows, args.shard_rows)):
                    pq.write_table(table.slice(start, args.shard_rows), raw_dir / f"part-{i:05d}.parquet",
                                   row_group_size=args.row_group, compression="zstd")

            def commit_write():
                with ShardWriter(root, "bench", "trajectories", "bench", rows_per_shard=args.shard_rows,
                                 row_group_size=args.row_group) as w:
                    w.write(table)

            def raw_read():
                return pa.concat_tables([pq.read_table(p) for p in sorted(raw_dir.glob("*.parquet"))])

            # alternate which side goes first, so caches and machine noise favour neither
            steps = [("raw write", raw_write), ("commit write", commit_write),
                     ("raw read", raw_read), ("manifest read", lambda: load_table("bench", "trajectories", root))]
            order = [0, 1, 2, 3] if r % 2 == 0 else [1, 0, 3, 2]
            for i in order:
                name, fn = steps[i]
                t, out = timed(fn)
                results[name].append(t)
                if "read" in name:
                    assert out.num_rows == table.num_rows
            shutil.rmtree(raw_dir), shutil.rmtree(root)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    best = {k: min(v) for k, v in results.items()}
    print(f"\n{'step':<15}{'best s':>10}{'rows/s':>14}")
    for k, v in best.items():
        print(f"{k:<15}{v:>10.2f}{args.rows / v:>14,.0f}")
    w, rd = best["commit write"] / best["raw write"], best["manifest read"] / best["raw read"]
    print(f"\ncommit/raw write time ratio: {w:.3f}  (overhead {100 * (w - 1):+.1f}%, target <= +20%)")
    print(f"manifest/raw read time ratio: {rd:.3f}  (overhead {100 * (rd - 1):+.1f}%)")
    setting = f"{args.rows:,} rows"
    record("commit protocol write", results["commit write"], "raw pyarrow write", results["raw write"], "s",
           better="lower", paired=True, setting=setting)
    record("manifest read", results["manifest read"], "raw pyarrow read", results["raw read"], "s",
           better="lower", paired=True, setting=setting)


if __name__ == "__main__":
    main()

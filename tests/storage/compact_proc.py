"""A compaction process for the compaction tests.

    python -m tests.storage.compact_proc ROOT DATASET rounds ROWS N [PACE]  # N compactions, each merging pairs
    python -m tests.storage.compact_proc ROOT DATASET kill POINT ROWS # compact, SIGKILL itself at POINT

`rounds`: compaction k (k = 1..N) packs shards into at most ROWS * 2**k rows, so shards of
ROWS rows merge two by two, again and again (a new manifest each round). With PACE (a
file the reader writes its count of finished reads to), round k waits until the reader has
finished k reads, so a slow machine still interleaves reads with every round. `kill` points:
`writing` (inside the second row group of the first new shard), `written` (the first new
shard is whole in its temp file, the others not yet), `renamed` (every new shard renamed
into place, the manifest not yet swapped), `swapped` (the new manifest in place, the
replaced files not yet removed).
"""

import os
import signal
import sys
import time
from pathlib import Path

from storage import compact, manifest


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def kill_at(point: str) -> None:
    if point == "writing":
        real_writer = compact.pq.ParquetWriter

        class Dying(real_writer):
            calls = 0

            def write_table(self, *a, **kw):
                Dying.calls += 1
                if Dying.calls == 2:
                    die()
                return super().write_table(*a, **kw)

        compact.pq.ParquetWriter = Dying
        compact.ROW_GROUP = 7  # several row groups per new shard
    elif point == "written":
        real_group = compact._write_group

        def write_group(*a):
            out = real_group(*a)
            die()
            return out

        compact._write_group = write_group
    elif point in ("renamed", "swapped"):
        real_replace = manifest.replace

        def replace(*a):
            if point == "renamed":
                die()
            out = real_replace(*a)
            die()
            return out

        manifest.replace = replace
    else:
        raise SystemExit(f"unknown kill point {point!r}")


def wait_for_reads(pace: Path, k: int, limit_s: float = 60.0) -> None:
    """Until the reader has written a count of at least `k` to `pace` (or `limit_s` passed)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            if int(pace.read_text() or 0) >= k:
                return
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.005)


def main() -> None:
    root, dataset, mode = sys.argv[1:4]
    if mode == "rounds":
        rows, n = int(sys.argv[4]), int(sys.argv[5])
        pace = Path(sys.argv[6]) if len(sys.argv) > 6 else None
        for k in range(1, n + 1):
            if pace is not None:
                wait_for_reads(pace, k)
            print(compact.compact(root, dataset, rows_per_shard=rows * 2 ** k), flush=True)
    elif mode == "kill":
        kill_at(sys.argv[4])
        compact.compact(root, dataset, rows_per_shard=int(sys.argv[5]))
        raise SystemExit("compaction finished without being killed")


if __name__ == "__main__":
    main()

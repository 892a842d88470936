"""A writer process for the crash and concurrency tests: writes `shards` shards of `rows`
trajectory-shaped rows each into (dataset, trajectories, run) under the given data root.

    python -m tests.storage.writer_proc ROOT DATASET RUN SHARDS ROWS [FIRST]

FIRST: the number of the first row (default 0), so that writers of one run write other rows.
"""

import sys

from storage import ShardWriter
from storage.samples import SAMPLES


def rows(i0: int, n: int) -> list[dict]:
    base = SAMPLES["trajectories"]
    return [dict(base, traj_id=f"t{i}", answer=f"answer {i}", question=f"question {i} " + "pad " * 40)
            for i in range(i0, i0 + n)]


def main() -> None:
    root, dataset, run, shards, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    first = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    with ShardWriter(root, dataset, "trajectories", run, rows_per_shard=n, row_group_size=max(1, n // 4)) as w:
        for s in range(shards):
            w.write(rows(first + s * n, n))
            print(f"committed {s}", flush=True)


if __name__ == "__main__":
    main()

"""Exports and the dataset card stream: a dataset 4x larger does not raise peak memory by more
than 10%. Each measurement runs in a fresh process (not timed) and counts what the work
allocates: Python objects (tracemalloc's peak) plus Arrow buffers (the memory pool's peak).
(The process's peak RSS also drifts with the allocators' fragmentation, by a few percent.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage import ShardWriter
from storage.samples import SAMPLES
from storage.schema import load
from storage.shards import stamp

REPO = Path(__file__).resolve().parents[2]
PAD = "The tower stands by the river, its stones older than the town around it. " * 30  # ~2 KB a message

MEASURE = """
import json, sys, tracemalloc
import pyarrow as pa
root, dataset, what, out = sys.argv[1:5]
from storage.card import card_text
from train import export

export.CHUNK, export.GROUP_BYTES = 500, 1 << 20  # small buffers: both datasets reach their steady state
tracemalloc.start()
if what == "trl":
    export.export_trl(dataset, out, root, test_fraction=0.2)
else:
    card_text(root, dataset)
python, arrow = tracemalloc.get_traced_memory()[1], pa.default_memory_pool().max_memory()
print(json.dumps({"python_mb": python / 2**20, "arrow_mb": arrow / 2**20, "peak_mb": (python + arrow) / 2**20}))
"""


def trajectories(n: int) -> pa.Table:
    base, schema = SAMPLES["trajectories"], load("trajectories")
    rows = []
    for i in range(n):
        q = f"Where was person {i} born? {PAD[: 200 + i % 97]}"
        msgs = [dict(m, content=q if m["role"] == "user" else m["content"] + " " + PAD) for m in base["messages"]]
        rows.append(dict(base, traj_id=f"tr{i}", question=q, answer=f"town {i}", messages=msgs, id=f"id{i:07d}",
                         meta=json.dumps({"hop_count": 1 + i % 3, "aliases": [f"t{i}"]})))
    return pa.Table.from_pylist(stamp(rows, schema, "r1"), schema=schema.arrow)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    for name, n in (("small", 4_000), ("large", 16_000)):
        with ShardWriter(root, name, "trajectories", "r1", rows_per_shard=2_000) as w:  # a shard per chunk read
            w.write(trajectories(n))
    return root


def peak(root, dataset: str, what: str, out) -> dict:
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(root), dataset, what, str(out)], cwd=REPO,
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("what", ["trl", "card"])
def test_a_dataset_4x_larger_does_not_raise_peak_memory(root, tmp_path, what):
    small = peak(root, "small", what, tmp_path / "small")
    large = peak(root, "large", what, tmp_path / "large")
    assert large["peak_mb"] <= 1.10 * small["peak_mb"], (small, large)
    if what == "trl":  # and it exported every row
        for size, n in (("small", 4_000), ("large", 16_000)):
            assert sum(pq.read_metadata(tmp_path / size / f"sft_{s}.parquet").num_rows for s in ("train", "test")) == n

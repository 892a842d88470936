"""Reading a large shard chunk by chunk holds about one chunk, not the part of the file read so
far (storage/reader.py `iter_tables`). The reading runs in a process of its own, which reports
its RSS after each chunk; nothing is timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from storage import write_rows

REPO = Path(__file__).resolve().parents[2]

READ = """
import json, sys
from storage.reader import iter_tables

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

out = [rss()]
for t in iter_tables("big", "documents", sys.argv[1], rows=500, columns=["doc_id", "text"]):
    out.append(rss())
print(json.dumps(out))
"""


def test_reading_a_large_shard_chunk_by_chunk_does_not_hold_what_it_read(tmp_path):
    if not Path("/proc/self/status").exists():
        import pytest
        pytest.skip("reads RSS from /proc")
    # 96 row groups of 500 documents of 2 KB of hex digits (1 KB compressed): one shard of ~50 MB
    rows = [{"doc_id": f"d{i}", "title": f"t{i}", "text": os.urandom(1024).hex(), "source": "test"} for i in range(48_000)]
    write_rows(tmp_path, "big", "documents", "r", rows, row_group_size=500)
    shard = next((tmp_path / "big" / "documents").rglob("*.parquet"))
    assert shard.stat().st_size > 48 << 20
    p = subprocess.run([sys.executable, "-c", READ, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr[-2000:]
    series = json.loads(p.stdout)
    assert len(series) == 97  # (the RSS before, then after each of the 96 chunks)
    settled = series[10]  # after a few chunks: the reader's buffers and the allocator's pools are there
    assert max(series[10:]) - settled < 32, (series[::8], shard.stat().st_size >> 20)

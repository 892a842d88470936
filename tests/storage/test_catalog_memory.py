"""A catalog's DuckDB holds at most $FORGEPLAY_DUCKDB_MEMORY (storage/catalog.py `connect`): a
query whose hash table is larger spills to a temp folder of its own, answers the same, and the
folder is gone once the connection closes; a bad value is a clear error. The query runs in a
process of its own, which reports its RSS; nothing is timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from storage import Catalog
from storage.catalog import MEMORY_ENV

REPO = Path(__file__).resolve().parents[2]

QUERY = """
import json, os
from storage.catalog import connect

def status(field):  # VmHWM: this process's peak RSS (ru_maxrss would count its parent's before exec)
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024

rss, peak = lambda: status("VmRSS"), lambda: status("VmHWM")

# 6,000,000 distinct 40-character strings: a DISTINCT over them holds several hundred MB
SQL = "SELECT count(DISTINCT 'record-' || lpad(i::VARCHAR, 33, '0')), count(*) FROM range(6000000) t(i)"
out = {}
con = connect()
spill = con.execute("SELECT current_setting('temp_directory')").fetchone()[0]
before = rss()
out["limited"] = con.execute(SQL).fetchone()
out["limited_mib"], out["spilled"] = peak() - before, os.path.isdir(spill)
con.close()
out["left"] = os.path.exists(spill)
os.environ.pop("FORGEPLAY_DUCKDB_MEMORY")
con = connect()
con.execute("SET memory_limit = '8GB'")
before = rss()
out["unlimited"] = con.execute(SQL).fetchone()
out["unlimited_mib"] = peak() - before
print(json.dumps(out))
"""


def test_a_query_past_the_catalogs_memory_spills_and_answers_the_same():
    env = {**os.environ, "PYTHONPATH": str(REPO), MEMORY_ENV: "96MB"}
    p = subprocess.run([sys.executable, "-c", QUERY], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.splitlines()[-1])  # (after any progress bar DuckDB printed)
    assert out["limited"] == out["unlimited"] == [6_000_000, 6_000_000]
    assert out["spilled"] and not out["left"]
    assert out["limited_mib"] < 200 and out["unlimited_mib"] > 400, out  # (MiB of RSS the query added)


def test_the_catalog_takes_its_memory_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, "300MB")
    with Catalog(tmp_path) as cat:
        assert cat.con.execute("SELECT current_setting('memory_limit')").fetchone()[0] in ("286.1 MiB", "300.0 MB")
    monkeypatch.setenv(MEMORY_ENV, "lots")
    with pytest.raises(ValueError, match=r"FORGEPLAY_DUCKDB_MEMORY must be an amount of memory.*'lots'"):
        Catalog(tmp_path)

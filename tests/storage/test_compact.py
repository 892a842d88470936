"""Compaction (storage/compact.py, `forgeplay compact`): the same rows, ids and order in
fewer shards with checksums that verify; readers during compactions see the old shards or
the new ones, never both, never none; a kill at any point leaves the old state (or the
whole new one); writers compact their run past a shard count; reruns write nothing twice.
Real shards, real manifests, real DuckDB, real processes killed with SIGKILL."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from flows.cli import app
from storage import Catalog, ShardWriter, load_table, manifest, verify, write_rows
from storage import runstate
from storage.compact import AUTO_ENV, compact
from storage.reader import iter_tables
from storage.resumable import RunWriter

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def docs(n, start=0):
    return [{"doc_id": f"d{i}", "title": f"T{i}", "text": f"text {i}", "source": "t", "id": f"id{i:05d}"}
            for i in range(start, start + n)]


def small_shards(run, n, rows, start=0, dataset="demo"):
    """`n` shards of `rows` documents each, committed one by one."""
    with ShardWriter(None, dataset, "documents", run, rows_per_shard=rows) as w:
        w.write(docs(n * rows, start))
    return w.committed


def ids(kind="documents", dataset="demo", **kw):
    return load_table(dataset, kind, **kw).column("id").to_pylist()


def part_files(folder):
    return sorted(p.name for p in folder.iterdir() if manifest.PART_RE.match(p.name))


@pytest.fixture(autouse=True)
def no_auto(monkeypatch):
    monkeypatch.setenv(AUTO_ENV, "0")  # the tests build their many small shards first


def test_compaction_keeps_rows_ids_order_and_writes_checksums(data_root):
    small_shards("r1", 20, 5)
    for k in range(6):  # two runs committed in turn: nothing merges across the other's shards
        write_rows(None, "demo", "documents", "r2" if k % 2 else "r3", docs(4, 1000 + 4 * k))
    small_shards("r2", 4, 3, start=2000)
    ddir = data_root / "demo"
    quarantined = manifest.read(ddir)[10].path
    (ddir / manifest.QUARANTINE).write_text(f'["{quarantined}"]')
    before = load_table("demo", "documents")
    entries_before = manifest.read(ddir)

    res = runner.invoke(app, ["compact", "demo", "--rows-per-shard", "1000"])
    assert res.exit_code == 0, res.output
    assert "rewritten as" in res.output
    after = manifest.read(ddir)
    assert load_table("demo", "documents").equals(before)  # every column, the same order
    runs = [(e.run_id, e.rows) for e in after]
    assert runs == [("r1", 50), ("r1", 5), ("r1", 45)] + [("r3", 4), ("r2", 4)] * 2 + [("r3", 4), ("r2", 16)]
    assert quarantined in {e.path for e in after}  # left as it was
    for e in after:
        assert e.abspath(ddir).stat().st_size == e.bytes and manifest.file_sha256(e.abspath(ddir)) == e.sha256
    assert {e.committed_at for e in after} <= {e.committed_at for e in entries_before}
    for run in ("r1", "r2", "r3"):  # the folders hold exactly the listed shards, named in row order
        listed = [Path(e.path).name for e in after if e.run_id == run]
        assert part_files(ddir / f"documents/run={run}") == sorted(listed) == listed
    (ddir / manifest.QUARANTINE).write_text("[]")
    assert verify(None, "demo") == (len(after), [])
    res = runner.invoke(app, ["verify", "demo"])
    assert res.exit_code == 0 and f"{len(after)} shards ok" in res.output
    with Catalog() as cat:
        assert cat.rows("SELECT count(*), count(DISTINCT id) FROM demo_documents") == [(before.num_rows + 5,) * 2]
    res = runner.invoke(app, ["compact", "demo", "--rows-per-shard", "1000"])  # no longer quarantined: merged
    assert "demo: 3 shards (100 rows) rewritten as 1" in res.output
    assert "nothing to compact" in runner.invoke(app, ["compact", "demo", "--rows-per-shard", "1000"]).output


def test_kind_run_and_size_options_and_bad_arguments(data_root):
    small_shards("r1", 6, 4)
    small_shards("r2", 6, 4, start=100)
    res = runner.invoke(app, ["compact", "demo", "--kind", "documents", "--run-id", "r2", "--rows-per-shard", "8"])
    assert res.exit_code == 0, res.output
    assert [(e.run_id, e.rows) for e in manifest.read(data_root / "demo")] == [("r1", 4)] * 6 + [("r2", 8)] * 3
    for args, says in ((["compact", "nope"], "no dataset 'nope'"), (["compact", "demo", "--kind", "dogs"], "unknown record kind"),
                       (["compact", "demo", "--rows-per-shard", "0"], "--rows-per-shard")):
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and says in res.output, res.output


def test_readers_see_the_same_rows_while_compactions_run(data_root):
    small_shards("r1", 128, 20)
    expected = ids()
    ddir = data_root / "demo"
    pace = data_root / "reads"  # each round waits for one more finished read: slow machines interleave too
    proc = subprocess.Popen([sys.executable, "-m", "tests.storage.compact_proc", str(data_root), "demo", "rounds",
                             "20", "7", str(pace)], cwd=REPO, stdout=subprocess.DEVNULL)
    seen, reads = set(), 0
    try:
        while proc.poll() is None:
            seen.add(len(manifest.read(ddir)))
            assert ids() == expected
            chunks = []
            for t in iter_tables("demo", "documents", rows=300):
                chunks += t.column("id").to_pylist()
                time.sleep(0.002)  # a slow consumer: compactions happen between its chunks
            assert chunks == expected
            with Catalog() as cat:
                assert cat.rows("SELECT count(*), count(DISTINCT id), min(id), max(id) FROM demo_documents") == \
                    [(len(expected), len(expected), expected[0], expected[-1])]
                assert not cat.problems
            reads += 1
            pace.write_text(str(reads))
    finally:
        pace.write_text("1000")  # a reader that failed holds no round back
        proc.wait()
    assert proc.returncode == 0
    assert len(manifest.read(ddir)) == 1 and ids() == expected
    assert len(seen) >= 3, f"the readers saw too few manifests to be meaningful: {sorted(seen)} in {reads} reads"


def test_a_reader_mid_stream_and_an_older_catalog_carry_on_after_a_compaction(data_root):
    small_shards("r1", 30, 10)
    expected = ids()
    chunks = iter_tables("demo", "documents", rows=7)
    got = [next(chunks) for _ in range(5)]
    with Catalog() as cat:
        compact(None, "demo")
        assert len(manifest.read(data_root / "demo")) == 1
        got += list(chunks)  # resumes at its row in the new shard
        assert pa.concat_tables(got).column("id").to_pylist() == expected
        assert cat.scalar("SELECT count(DISTINCT id) FROM demo_documents") == 300  # views made again


@pytest.mark.parametrize("point", ["writing", "written", "renamed", "swapped"])
def test_a_kill_mid_compaction_leaves_the_old_rows(data_root, point):
    small_shards("r1", 30, 10)
    ddir = data_root / "demo"
    before, old = load_table("demo", "documents"), manifest.read(ddir)
    proc = subprocess.run([sys.executable, "-m", "tests.storage.compact_proc", str(data_root), "demo", "kill", point,
                           "100"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    now = manifest.read(ddir)
    if point == "swapped":  # the new state, whole; the replaced files are leftovers nobody reads
        assert [e.rows for e in now] == [100, 100, 100]
        assert all(e.abspath(ddir).exists() for e in old)
    else:
        assert now == old
    assert load_table("demo", "documents").equals(before)
    with Catalog() as cat:
        assert cat.scalar("SELECT count(DISTINCT id) FROM demo_documents") == 300 and not cat.problems
    assert verify(None, "demo") == (len(now), [])

    compact(None, "demo", rows_per_shard=100)  # a rerun finishes the work and sweeps the leftovers
    now = manifest.read(ddir)
    assert [e.rows for e in now] == [100, 100, 100] and load_table("demo", "documents").equals(before)
    assert part_files(ddir / "documents/run=r1") == sorted(Path(e.path).name for e in now)


def test_a_writer_compacts_its_run_past_the_threshold(data_root, monkeypatch):
    monkeypatch.setenv(AUTO_ENV, "8")
    w = RunWriter(None, "run1")
    for k in range(60):
        w.commit("demo", "documents", docs(3, 3 * k))
    ddir = data_root / "demo"
    entries = manifest.read(ddir)
    assert len(entries) < 20 and sum(e.rows for e in entries) == 180
    assert ids() == [f"id{i:05d}" for i in range(180)]
    assert verify(None, "demo") == (len(entries), [])
    assert part_files(ddir / "documents/run=run1") == sorted(Path(e.path).name for e in entries)
    assert w.commit("demo", "documents", docs(30)) == 0 and w.count("demo", "documents") == 180

    monkeypatch.setenv(AUTO_ENV, "0")  # off
    for k in range(12):
        w.commit("demo", "documents", docs(1, 500 + k))
    assert len(manifest.read(ddir)) == len(entries) + 12
    monkeypatch.setenv(AUTO_ENV, "many")
    with pytest.raises(ValueError, match="FORGEPLAY_COMPACT_SHARDS must be a whole number"):
        ShardWriter(None, "demo", "documents", "run2")


def test_writers_of_one_run_in_two_processes_compact_it_as_they_go(data_root, monkeypatch):
    """Two processes commit shards of one run (other rows each, as synthesis workers do) and
    compact it past 8 small shards while a reader counts: every count is whole shards, no row
    twice; at the end every row is there once, in fewer shards, and verify passes."""
    monkeypatch.setenv(AUTO_ENV, "8")
    procs = [subprocess.Popen([sys.executable, "-m", "tests.storage.writer_proc", str(data_root), "crash", "r1", "40",
                               "10", str(first)], cwd=REPO, stdout=subprocess.DEVNULL, env=os.environ)
             for first in (0, 10_000)]
    seen = set()
    try:
        while any(p.poll() is None for p in procs):
            if (data_root / "crash" / manifest.MANIFEST).exists():
                with Catalog() as cat:
                    n, distinct = cat.rows("SELECT count(*), count(DISTINCT traj_id) FROM crash_trajectories")[0]
                assert n % 10 == 0 and n == distinct
                seen.add(n)
    finally:
        for p in procs:
            p.wait()
    assert [p.returncode for p in procs] == [0, 0]
    traj = load_table("crash", "trajectories").column("traj_id").to_pylist()
    assert sorted(traj) == sorted([f"t{i}" for i in range(400)] + [f"t{i}" for i in range(10_000, 10_400)])
    entries = manifest.read(data_root / "crash")
    assert len(entries) < 40 and verify(None, "crash") == (len(entries), [])
    assert len(seen) >= 3


def test_a_rerun_after_compaction_writes_nothing_twice(data_root):
    small_shards("r1", 10, 5)
    compact(None, "demo")
    assert sum(e.rows for e in write_rows(None, "demo", "documents", "r1", docs(60), rows_per_shard=5)) == 10
    runstate._STATES.clear()  # as a new process would
    compact(None, "demo")
    assert sum(e.rows for e in write_rows(None, "demo", "documents", "r1", docs(70), rows_per_shard=5)) == 10
    assert ids() == [f"id{i:05d}" for i in range(70)]

    def writer_proc():  # a real new process writing trajectories of run r1, 3 shards of 50
        return subprocess.run([sys.executable, "-m", "tests.storage.writer_proc", str(data_root), "crash", "r1", "3",
                               "50"], cwd=REPO, capture_output=True, env=os.environ).returncode

    assert writer_proc() == 0
    compact(None, "crash")
    assert writer_proc() == 0
    traj = load_table("crash", "trajectories").column("traj_id").to_pylist()
    assert len(traj) == len(set(traj)) == 150 and len(manifest.read(data_root / "crash")) == 1


def test_the_manifest_tail_reads_what_was_appended_and_notices_a_swap(data_root):
    small_shards("r1", 3, 2)
    ddir = data_root / "demo"
    tail = manifest.Tail(ddir)
    first, whole = tail.read()
    assert whole and len(first) == 3
    assert tail.read() == ([], False)
    small_shards("r1", 2, 2, start=10)
    new, whole = tail.read()
    assert not whole and [e.rows for e in new] == [2, 2]
    with open(ddir / manifest.MANIFEST, "ab") as f:
        f.write(b'{"kind": "documents", "ru')  # torn: not read until a whole line follows
    assert tail.read() == ([], False)
    small_shards("r1", 1, 2, start=20)
    new, whole = tail.read()
    assert not whole and len(new) == 1
    compact(None, "demo")
    everything, whole = tail.read()
    assert whole and everything == manifest.read(ddir) and len(everything) == 1

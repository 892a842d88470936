"""Shard writer: validation, commit protocol, idempotent reruns, schema evolution, loaders."""

import json

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage import Catalog, RowError, ShardWriter, data_files, load_hf, load_table, write_rows
from storage import manifest
from storage.schema import load
from storage.shards import stamp


def docs(n, start=0, text="x"):
    return [{"doc_id": f"d{i}", "title": f"T{i}", "text": f"{text} {i}", "source": "t"} for i in range(start, start + n)]


def test_rows_land_in_hive_layout_with_manifest(data_root):
    entries = write_rows(None, "demo", "documents", "r1", docs(10), rows_per_shard=4)
    assert [e.rows for e in entries] == [4, 4, 2]
    assert [e.path for e in entries] == [f"documents/run=r1/part-0000{i}.parquet" for i in range(3)]
    ddir = data_root / "demo"
    assert manifest.read(ddir) == entries
    for e in entries:
        t = pq.read_table(ddir / e.path)
        assert t.num_rows == e.rows and set(t.column("run_id").to_pylist()) == {"r1"}
    assert not list(ddir.rglob("*.tmp"))
    assert load_table("demo", "documents").num_rows == 10


def test_rerun_same_run_is_a_noop_and_writes_only_missing(data_root):
    write_rows(None, "demo", "documents", "r1", docs(5))
    assert write_rows(None, "demo", "documents", "r1", docs(5)) == []
    more = write_rows(None, "demo", "documents", "r1", docs(8))
    assert sum(e.rows for e in more) == 3
    ids = load_table("demo", "documents").column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 8
    # another run id is another run: its rows are kept beside the first run's
    write_rows(None, "demo", "documents", "r2", docs(2))
    assert load_table("demo", "documents", run_id="r2").num_rows == 2


def test_duplicates_inside_one_batch_are_written_once(data_root):
    with ShardWriter(None, "demo", "documents", "r1") as w:
        assert w.write(docs(3) + docs(3)) == 3
        assert w.write(docs(4)) == 1
    assert load_table("demo", "documents").num_rows == 4


def test_bad_row_raises_naming_row_and_field_and_writes_nothing(data_root):
    rows = docs(5)
    rows[3]["title"] = 42
    with pytest.raises(RowError, match=r"documents row 3: field 'title'"):
        write_rows(None, "demo", "documents", "r1", rows)
    rows[3] = {"doc_id": "x", "title": "t", "text": "y"}  # missing source
    with pytest.raises(RowError, match=r"row 3: .*'source' is a required property"):
        write_rows(None, "demo", "documents", "r1", rows)
    with pytest.raises(RowError, match=r"row 1: field '<row>'"):
        write_rows(None, "demo", "documents", "r1", [docs(1)[0], "not a dict"])
    assert manifest.read(data_root / "demo") == []
    assert not (data_root / "demo" / "documents").exists()


def test_arrow_table_input_is_checked(data_root):
    s = load("documents")
    table = pa.Table.from_pylist(
        [dict(r, id=f"i{i}", run_id="r1", schema_version=1, created_at=None, lineage={"parent_ids": []})
         for i, r in enumerate(docs(3))])
    with pytest.raises(RowError, match="created_at"):
        write_rows(None, "demo", "documents", "r1", table)
    table = table.set_column(table.schema.get_field_index("created_at"), "created_at",
                             pa.array([0, 0, 0], pa.timestamp("us", tz="UTC")))
    assert sum(e.rows for e in write_rows(None, "demo", "documents", "r1", table)) == 3
    with pytest.raises(RowError, match="column is not in the schema"):
        write_rows(None, "demo", "documents", "r1", table.append_column("bogus", pa.array([1, 2, 3])))
    assert load_table("demo", "documents").schema.field("created_at").type == s.arrow.field("created_at").type


def test_exception_inside_writer_commits_nothing_buffered(data_root):
    with pytest.raises(RuntimeError):
        with ShardWriter(None, "demo", "documents", "r1", rows_per_shard=4) as w:
            w.write(docs(6))  # one shard of 4 commits; 2 rows stay buffered
            raise RuntimeError("crash")
    assert load_table("demo", "documents").num_rows == 4
    write_rows(None, "demo", "documents", "r1", docs(6))
    assert sorted(load_table("demo", "documents").column("doc_id").to_pylist()) == sorted(r["doc_id"] for r in docs(6))


def test_schema_versions_1_and_2_read_together(data_root):
    v1 = load("documents")
    v2 = v1.with_added_column("language", {"type": ["string", "null"]}, version=2)
    write_rows(None, "demo", "documents", "r1", docs(3))
    write_rows(None, "demo", "documents", "r1", [dict(r, language="en") for r in docs(2, start=10)], schema=v2)
    versions = sorted({e.schema_version for e in manifest.read(data_root / "demo")})
    assert versions == [1, 2]
    t = load_table("demo", "documents")
    assert t.num_rows == 5 and "language" in t.column_names
    assert t.column("language").to_pylist() == [None, None, None, "en", "en"]
    with Catalog() as cat:
        got = cat.rows("SELECT schema_version, count(*), count(language) FROM demo_documents "
                      "GROUP BY 1 ORDER BY 1")
    assert got == [(1, 3, 0), (2, 2, 2)]


def test_loaders_give_hf_datasets(data_root):
    write_rows(None, "demo", "documents", "r1", docs(7), rows_per_shard=3)
    ds = load_hf("demo", "documents")
    assert isinstance(ds, datasets.Dataset) and ds.num_rows == 7
    assert sorted(ds["doc_id"]) == sorted(r["doc_id"] for r in docs(7))
    files = data_files("demo", "documents")
    assert len(files) == 3
    hf = datasets.load_dataset("parquet", data_files=files, split="train")
    assert hf.num_rows == 7 and "lineage" in hf.column_names


def test_torn_manifest_line_is_ignored_and_repaired(data_root):
    write_rows(None, "demo", "documents", "r1", docs(2))
    path = data_root / "demo" / manifest.MANIFEST
    with open(path, "ab") as f:
        f.write(b'{"kind": "documents", "run_id": "r1", "pa')  # writer died mid-append
    assert len(manifest.read(data_root / "demo")) == 1
    write_rows(None, "demo", "documents", "r1", docs(2, start=5))
    lines = path.read_bytes().split(b"\n")
    assert len(manifest.read(data_root / "demo")) == 2
    assert all(json.loads(l) for l in lines if l.startswith(b'{"bytes"'))


def test_names_are_checked(data_root):
    with pytest.raises(ValueError, match="invalid dataset name"):
        write_rows(None, "../evil", "documents", "r1", docs(1))
    with pytest.raises(KeyError, match="unknown record kind"):
        write_rows(None, "demo", "nonsense", "r1", docs(1))


def test_bulk_table_path_dedups_like_the_row_path(data_root):
    from storage.shards import stamp

    s = load("documents")
    rows = stamp(docs(12_000), s, "r1")
    table = pa.Table.from_pylist(rows, schema=s.arrow)
    entries = write_rows(None, "demo", "documents", "r1", table, rows_per_shard=5_000)
    assert [e.rows for e in entries] == [5_000, 5_000, 2_000]
    assert write_rows(None, "demo", "documents", "r1", table, rows_per_shard=5_000) == []  # rerun: all known
    doubled = pa.concat_tables([table.slice(0, 6_000), table.slice(3_000, 9_000),
                                pa.Table.from_pylist(stamp(docs(500, start=20_000), s, "r1"), schema=s.arrow)])
    more = write_rows(None, "demo", "documents", "r1", doubled, rows_per_shard=5_000)
    assert sum(e.rows for e in more) == 500  # repeats inside the batch and known ids are dropped
    ids = load_table("demo", "documents").column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 12_500
    assert not list((data_root / "demo").rglob("*.tmp"))


def test_many_chunks_through_one_writer_write_each_id_once(data_root):
    """One writer, written to and closed again and again (how a flow commits chunk by
    chunk): the writer used to forget the first batch's ids when nothing was committed before."""
    s = load("documents")
    w = ShardWriter(None, "demo", "documents", "r1")
    for k in range(6):  # large batches that overlap the ones before
        rows = stamp([dict(r, id=f"id{i}") for i, r in enumerate(docs(12_000, start=k * 6_000), start=k * 6_000)], s, "r1")
        w.write(pa.Table.from_pylist(rows, schema=s.arrow))
        w.close()
    ids = load_table("demo", "documents").column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 42_000 and len(w.known_ids()) == 42_000


def test_a_writer_holds_less_than_a_row_group_and_streams_the_rest_to_its_temp_file(data_root):
    """Rows written a few at a time wait in memory until they fill a row group, which goes to the
    open shard's hidden temp file: the shards come out as if written whole (rows, order, row
    groups), and a writer that fails mid-shard leaves neither a temp file nor a shard."""
    run_dir = data_root / "demo" / "documents" / "run=r1"
    with ShardWriter(None, "demo", "documents", "r1", rows_per_shard=1000, row_group_size=300) as w:
        for i in range(0, 2500, 70):
            w.write(docs(min(70, 2500 - i), start=i))
            held = w._open.held if w._open else 0
            pending = w.known_count() - sum(e.rows for e in w.committed)
            assert held < 300 and pending == (w._open.rows if w._open else 0)  # (rows: in its file and held)
            assert len(list(run_dir.glob(".part-*.tmp"))) == (w._open is not None)
    assert [e.rows for e in w.committed] == [1000, 1000, 500]
    ddir = data_root / "demo"
    groups = [[m.row_group(g).num_rows for g in range(m.num_row_groups)]
              for m in (pq.ParquetFile(ddir / e.path).metadata for e in w.committed)]
    assert groups == [[300, 300, 300, 100], [300, 300, 300, 100], [300, 200]]
    got = load_table("demo", "documents").column("doc_id").to_pylist()
    assert got == [f"d{i}" for i in range(2500)] and not list(run_dir.glob(".part-*.tmp"))
    with pytest.raises(RuntimeError):
        with ShardWriter(None, "demo", "documents", "r2", rows_per_shard=1000, row_group_size=300) as w:
            w.write(docs(700, start=5000))
            assert w._open is not None and w._open.rows - w._open.held == 600  # in the temp file
            raise RuntimeError("killed mid-shard")
    assert not list((ddir / "documents").rglob(".part-*.tmp")) and load_table("demo", "documents").num_rows == 2500


def test_wide_rows_go_to_the_temp_file_once_the_buffer_holds_64_mb(data_root, monkeypatch):
    """Rows of a few KB fill memory long before a row group's count: the buffer is written as
    a row group of its own once it holds temp_shard.BUFFER_BYTES (here 200 KB)."""
    from storage import temp_shard

    monkeypatch.setattr(temp_shard, "BUFFER_BYTES", 200_000)
    with ShardWriter(None, "demo", "documents", "r1", rows_per_shard=1000, row_group_size=500) as w:
        for i in range(0, 600, 20):
            w.write(docs(20, start=i, text="x" * 4000))  # ~4 KB a row
            assert (w._open.held_bytes if w._open else 0) < 200_000 + 20 * 4200
    groups = [pq.ParquetFile(data_root / "demo" / e.path).metadata for e in w.committed]
    sizes = [m.row_group(g).num_rows for m in groups for g in range(m.num_row_groups)]
    assert sum(sizes) == 600 and max(sizes) < 100
    assert load_table("demo", "documents").column("doc_id").to_pylist() == [f"d{i}" for i in range(600)]

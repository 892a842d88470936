"""The resumable run writer (commits chunk by chunk, knows what its run committed), Arrow
stamping, chunked reading and the run funnel: real shards, real manifests, real DuckDB."""

import pyarrow as pa
import pytest

from storage import Catalog, load_table, write_rows
from storage import manifest
from storage.reader import iter_tables, prefetched
from storage.resumable import RunWriter
from storage.schema import load
from storage.shards import ShardWriter, stamp, stamp_table

LINEAGE = {"model": "m", "backend": "b", "config_hash": "h"}


def docs(n, start=0):
    return [{"doc_id": f"d{i}", "title": f"T{i}", "text": f"x {i}", "source": "t", "id": f"id{i}"}
            for i in range(start, start + n)]


def test_stamp_table_equals_stamping_dicts():
    s = load("documents")
    rows = docs(3)
    plain = pa.Table.from_pylist(stamp([{**r, "lineage": {**LINEAGE, "parent_ids": [r["id"]]}} for r in rows], s, "r1",
                                       LINEAGE), schema=s.arrow)
    arrow = stamp_table(pa.Table.from_pylist(rows), s, "r1", LINEAGE, parents=True)
    assert arrow.schema == s.arrow
    assert arrow.drop_columns(["created_at"]).to_pylist() == plain.drop_columns(["created_at"]).to_pylist()
    no_parents = stamp_table(pa.Table.from_pylist(rows), s, "r1", LINEAGE)
    assert no_parents.column("lineage").to_pylist()[0] == {**LINEAGE, "parent_ids": []}


def test_commits_chunk_by_chunk_and_a_new_writer_knows_what_the_run_committed(data_root):
    w = RunWriter(None, "run1", LINEAGE)
    assert w.commit("demo", "documents", pa.Table.from_pylist(docs(4)), parents=True) == 4
    assert w.commit("demo", "documents", docs(6), parents=True) == 2  # dicts, 4 of them committed already
    assert w.count("demo", "documents") == 6
    assert len(manifest.read(data_root / "demo")) == 2  # one shard per commit, published at once
    again = RunWriter(None, "run1", LINEAGE)  # a rerun of the same run
    assert sorted(again.committed("demo", "documents").to_pylist()) == sorted(r["id"] for r in docs(6))
    assert again.committed("demo", "documents", "doc_id").to_pylist()[:2] == ["d0", "d1"]
    assert again.commit("demo", "documents", pa.Table.from_pylist(docs(6))) == 0
    assert again.count("demo", "documents") == 6 and RunWriter(None, "other").count("demo", "documents") == 0
    t = load_table("demo", "documents")
    assert t.num_rows == 6 and t.column("lineage").to_pylist()[5]["parent_ids"] == ["id5"]
    assert set(t.column("run_id").to_pylist()) == {"run1"}


def test_trusted_dicts_skip_the_json_schema_and_untrusted_ones_do_not(data_root):
    w = RunWriter(None, "run1")
    bad = [{**docs(1)[0], "title": 5}]  # breaks the schema's type, but Arrow casts 5 to "5"
    with pytest.raises(ValueError, match="title"):
        w.commit("demo", "documents", bad)
    assert w.commit("demo", "documents", docs(2), trusted=True) == 2


def test_a_failed_commit_leaves_no_half_shard_and_the_next_one_works(data_root, monkeypatch):
    w = RunWriter(None, "run1")
    w.commit("demo", "documents", docs(2))

    def dying(*a):
        raise OSError("disk gone")

    with monkeypatch.context() as m:  # the shard is in place, its manifest line is not
        m.setattr(manifest, "append", dying)
        with pytest.raises(OSError):
            w.commit("demo", "documents", docs(5))
    assert load_table("demo", "documents").num_rows == 2 and not list((data_root / "demo").rglob("*.tmp"))
    assert w.commit("demo", "documents", docs(5)) == 3  # a fresh writer re-read what is committed
    ids = load_table("demo", "documents").column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 5


def test_iter_tables_gives_load_tables_rows_chunk_by_chunk_across_versions(data_root):
    v2 = load("documents").with_added_column("language", {"type": ["string", "null"]}, version=2)
    write_rows(None, "demo", "documents", "r1", docs(7), rows_per_shard=3)
    write_rows(None, "demo", "documents", "r1", [dict(r, language="en") for r in docs(5, start=10)], schema=v2)
    whole = load_table("demo", "documents")
    for rows in (1, 4, 5, 100):
        parts = list(iter_tables("demo", "documents", rows=rows))
        assert [len(p) for p in parts[:-1]] == [rows] * (len(parts) - 1) and 0 < len(parts[-1]) <= rows
        assert pa.concat_tables(parts).equals(whole)
    slim = pa.concat_tables(iter_tables("demo", "documents", rows=4, drop=["lineage", "created_at"]))
    assert slim.column_names == [c for c in whole.column_names if c not in ("lineage", "created_at")]
    assert slim.column("language").to_pylist() == [None] * 7 + ["en"] * 5
    assert list(iter_tables("nothing", "documents")) == []


def test_prefetched_gives_the_same_items_in_order_and_raises_at_the_failing_one():
    assert list(prefetched(iter_tables("nothing", "documents"))) == []
    assert list(prefetched(range(50))) == list(range(50))

    def failing():
        yield from (1, 2)
        raise ValueError("bad shard")

    got = []
    with pytest.raises(ValueError, match="bad shard"):
        for x in prefetched(failing()):
            got.append(x)
    assert got == [1, 2]


def test_funnel_of_a_run_also_for_names_that_are_no_identifiers(data_root):
    s = load("verdicts")
    rows = [{"record_id": f"r{i}", "record_kind": "tasks", "layer": "schema", "check": "json_schema",
             "passed": i != 0, "reason": "ok" if i else "schema_violation", "id": f"v{i}"} for i in range(3)]
    write_rows(None, "my-data", "verdicts", "run1", pa.Table.from_pylist(stamp(rows, s, "run1"), schema=s.arrow))
    with Catalog() as cat:
        funnel = cat.funnel("my-data", "run1")
        assert cat.funnel("my-data", "other") == [] and cat.funnel("nothing") == []
    assert funnel == [{"layer": "schema", "check": "json_schema", "reason": "schema_violation", "rejected": 1,
                       "rows_in": 3, "rows_out": 2}]

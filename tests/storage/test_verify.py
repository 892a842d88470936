"""verify reports truncated, bit-flipped and missing shards by path; the rest stay queryable,
in DuckDB and through the loaders training reads with."""

from storage import Catalog, load_table, verify, write_rows


def docs(n):
    return [{"doc_id": f"d{i}", "title": f"T{i}", "text": f"text {i} " * 20, "source": "t"} for i in range(n)]


def test_truncated_and_bitflipped_shards_are_reported_and_skipped(data_root):
    entries = write_rows(None, "demo", "documents", "r1", docs(40), rows_per_shard=10)
    assert verify() == (4, [])
    ddir = data_root / "demo"
    truncated, flipped, missing = (ddir / e.path for e in entries[:3])
    truncated.write_bytes(truncated.read_bytes()[:-100])
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0x01
    flipped.write_bytes(bytes(data))
    missing.unlink()

    checked, problems = verify()
    assert checked == 4
    assert {(p.path, p.problem) for p in problems} == {
        (str(truncated), "size_mismatch"), (str(flipped), "checksum_mismatch"), (str(missing), "missing")}
    with Catalog() as cat:
        assert cat.scalar("SELECT count(*) FROM demo_documents") == 10
        assert cat.rows("SELECT min(doc_id) FROM demo_documents") == [("d30",)]
        assert {p.problem for p in cat.problems} == {"quarantined"}
    assert sorted(load_table("demo", "documents")["doc_id"].to_pylist()) == [f"d{i}" for i in range(30, 40)]

    # a repaired shard leaves quarantine at the next verify
    manifest_entry = entries[1]
    flipped.write_bytes(bytes(data[: len(data) // 2]) + bytes([data[len(data) // 2] ^ 0x01]) + bytes(data[len(data) // 2 + 1:]))
    _, problems = verify()
    assert str(flipped) not in {p.path for p in problems} and manifest_entry.rows == 10
    with Catalog() as cat:
        assert cat.scalar("SELECT count(*) FROM demo_documents") == 20
    assert load_table("demo", "documents").num_rows == 20


def test_catalog_skips_truncated_shard_even_before_verify(data_root):
    entries = write_rows(None, "demo", "documents", "r1", docs(20), rows_per_shard=10)
    p = data_root / "demo" / entries[0].path
    p.write_bytes(p.read_bytes()[:50])
    with Catalog() as cat:
        assert cat.scalar("SELECT count(*) FROM demo_documents") == 10
        assert [(x.path, x.problem) for x in cat.problems] == [(str(p), "size_mismatch")]

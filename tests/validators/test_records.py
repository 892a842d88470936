"""A chunk's records: converted once, sent to a worker process with only its own rows,
taken by index."""

import pickle

import pyarrow as pa

from validators.records import Records


def big_table(n=5000):
    return pa.table({"id": [f"r{i}" for i in range(n)], "question": ["q" * 200] * n, "run_id": ["x"] * n,
                     "tags": [[str(i), "t"] for i in range(n)]})


def test_a_slice_travels_alone_and_comes_back_equal():
    part = big_table().slice(100, 50)
    recs = Records.of_table(part)
    sent = pickle.dumps(recs)
    assert len(sent) < len(pickle.dumps(part)) / 20  # a pickled slice would carry the whole table
    back = pickle.loads(sent)
    assert back.ids == recs.ids == [f"r{i}" for i in range(100, 150)] and back.table.equals(part)
    assert back.values == part.to_pylist()


def test_take_fields_and_accepted_rows():
    recs = Records.of_table(big_table(6))
    assert recs.take(list(range(6))) is recs
    sub = recs.take([4, 1])
    assert sub.ids == ["r4", "r1"] and sub.values[0]["tags"] == ["4", "t"]
    assert recs.fields(("question", "nope"))[0] == {"question": "q" * 200}
    acc = recs.accepted([2, 3])
    assert acc.column_names == ["question", "tags", "id"] and acc.column("id").to_pylist() == ["r2", "r3"]
    plain = Records.of_values([{"id": "a", "run_id": "x", "q": 1}, "not json"])
    assert plain.ids[0] == "a" and len(plain.ids[1]) == 32 and not plain.is_object(1)
    assert plain.accepted([0]) == [{"q": 1, "id": "a"}]

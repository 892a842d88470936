"""A chunk's records: converted once, sent to a worker process with only its own rows,
taken by index, and the collector pause around bulk work restores the collector's state."""

import gc
import pickle
import threading

import pyarrow as pa

from validators.records import Records, gc_paused


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


def test_gc_pause_nests_across_threads_and_restores_the_collector():
    assert gc.isenabled()
    inside = threading.Event()
    leave = threading.Event()

    def other():
        with gc_paused():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    with gc_paused():
        t.start()
        inside.wait(10)
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread is still inside
    leave.set()
    t.join(10)
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()


def test_release_drops_values_only_when_the_table_can_give_them_again():
    recs = Records.of_table(big_table(4))
    first = recs.values
    recs.release()
    again = recs.values
    assert again == first and again is not first  # converted anew from the table
    plain = Records.of_values([{"q": 1}])
    plain.release()
    assert plain.values == [{"q": 1}]  # nothing else holds them: kept


def test_verdict_ids_of_a_record_equal_verdict_id_of_each():
    from validators.verdict import fail, ok, verdict_id, verdict_ids

    vs = [ok("schema", "json_schema"), ok("rules", "format"), fail("rules", "answer", "wrong_answer")]
    for rid in ("r1", "ünï\udcff", ""):
        assert verdict_ids(rid, "trajectories", vs) == [verdict_id(rid, "trajectories", v.layer, v.check) for v in vs]
    assert len(set(verdict_ids("r1", "trajectories", vs))) == 3

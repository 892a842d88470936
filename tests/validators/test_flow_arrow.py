"""The validate flow keeps chunks in Arrow from read to commit (schema fast path, accepted
rows taken by index); its verdicts and accepted rows equal those of the plain Python path
(Validator.process over the rows as dicts) on a dataset with clean rows, rows that break
the schema but fit the Arrow types, a row without an id and copies under new ids."""

import copy

import pyarrow as pa

from flows.validate import run
from storage import ShardWriter, load_schema, load_table, write_rows
from storage.schema import SHARED_COLUMNS
from storage.shards import stamp
from validators.context import corpus_fingerprint, rule_context
from validators.records import raw_id
from validators.validator import ValidateConfig, Validator

VERDICT_COLS = ("id", "record_id", "record_kind", "layer", "check", "passed", "reason", "score", "detail")


def odd_dataset(root, world_rows, docs, bank) -> None:
    plain = [{k: v for k, v in r.items() if k not in SHARED_COLUMNS} for r in copy.deepcopy(world_rows[:12])]
    rows = [dict(r, id=r["traj_id"]) for r in plain]
    broken = copy.deepcopy(rows[:5])
    broken[0]["route"] = ""  # not a route: the rules reject it
    broken[1]["messages"][0]["role"] = "robot"  # breaks the schema's enum
    broken[2]["meta"] = "{not json"  # breaks the json format
    broken[3]["traj_id"] = ""  # breaks minLength
    broken[4]["id"] = ""  # no id: its content hash stands in
    for i, r in enumerate(broken):
        r["id"] = r["id"] and f"{r['id']}-b{i}"
    copies = [dict(r, id=r["id"] + "-copy") for r in copy.deepcopy(rows[:3])]
    schema = load_schema("trajectories")
    with ShardWriter(root, "odd", "trajectories", "in") as w:  # the Arrow path: types checked, not the schema
        w.write(pa.Table.from_pylist(stamp(rows + broken + copies, schema, "in"), schema=schema.arrow))
    write_rows(root, "odd", "documents", "in", [{k: d[k] for k in ("doc_id", "title", "text", "source", "meta")}
                                                for d in docs])
    write_rows(root, "odd", "tools", "in", bank)


def test_arrow_chunks_give_the_verdicts_and_rows_of_the_python_path(world, tmp_path):
    root, world_rows, docs, bank = world
    odd_dataset(tmp_path, world_rows, docs, bank)
    cfg = ValidateConfig(dataset="odd", chunk=4, run_id="arrow")
    s = run(cfg, data_root=tmp_path, progress=False)
    got = sorted(tuple(v[c] for c in VERDICT_COLS) for v in load_table("odd", "verdicts", tmp_path).to_pylist())
    accepted = load_table("odd_valid", "trajectories", tmp_path).to_pylist()

    rows = load_table("odd", "trajectories", tmp_path).to_pylist()
    ctx = rule_context(str(tmp_path), "odd", corpus_fingerprint(str(tmp_path), "odd"))
    want_rows, want_acc = Validator(cfg, "trajectories", rule_ctx=ctx).process([(raw_id(r), r) for r in rows])
    assert got == sorted(tuple(v[c] for c in VERDICT_COLS) for v in want_rows)
    reasons = {v[6] for v in got if not v[5]}
    assert {"schema_violation", "unknown_route", "exact_duplicate"} <= reasons
    assert s["rows_in"] == 20 and s["rows_out"] == len(want_acc) == len(accepted)
    content = lambda r: {k: v for k, v in r.items() if k not in SHARED_COLUMNS}  # noqa: E731
    assert sorted((a["id"], str(content(a))) for a in accepted) == sorted((a["id"], str(content(a))) for a in want_acc)
    assert all(a["lineage"]["parent_ids"] == [a["id"]] and a["run_id"] == "arrow" for a in accepted)
    no_id = raw_id(next(r for r in rows if not r["id"]))
    assert len(no_id) == 32 and {v[1] for v in got if v[1] == no_id} == {no_id}  # checked under its content hash

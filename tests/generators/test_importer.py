"""The importer: HotpotQA / 2Wiki records (JSON Lines and JSON array), plain JSONL and
Parquet, bad records reported with their place and _id, no duplicates on re-import."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from generators.corpus.ids import doc_id
from generators.corpus.importer import import_file, join_sentences, normalise, RecordError
from storage.userfiles import detect_container, iter_json_array, iter_records
from storage.reader import load_table

ARLEN = ["Arlen Bridge", ["The Arlen Bridge is a stone arch bridge over the Tavy river in Merrow.",
                          " It was completed in 1887 to a design by Edith Carrow."]]
CARROW = ["Edith Carrow", ["Edith Carrow (1849 - 1921) was an English civil engineer.",
                           " She was born in Plymouth and trained under her father."]]
MERROW = ["Merrow", ["Merrow is a market town in Devon, England.", " Its population was 8,412 at the 2011 census."]]
PLYM = ["Plymouth", ["Plymouth is a port city on the south coast of Devon."]]
HALL = ["Tavy Hall", ["Tavy Hall is a concert venue in Merrow that opened in 1962."]]

GOOD_BRIDGE = {"_id": "5a8b57f25542995d1e6f1371", "question": "Where was the designer of the Arlen Bridge born?",
               "answer": "Plymouth", "type": "bridge", "level": "medium",
               "supporting_facts": [["Arlen Bridge", 1], ["Edith Carrow", 1]],
               "context": [ARLEN, CARROW, MERROW, PLYM]}
GOOD_COMPARISON = {"_id": "5ab3d4a0554299194fa9341c", "question": "Which opened first, the Arlen Bridge or Tavy Hall?",
                   "answer": "Arlen Bridge", "type": "comparison", "level": "hard",
                   "supporting_facts": [["Arlen Bridge", 1], ["Tavy Hall", 0]],
                   "context": [HALL, ARLEN, MERROW]}
NO_ANSWER = {"_id": "5a7a06935542990198eaf050", "question": "Who designed Tavy Hall?", "type": "bridge",
             "level": "easy", "supporting_facts": [["Tavy Hall", 0]], "context": [HALL]}
CONTEXT_NOT_LIST = {"_id": "5ae0185b55429942ec259c1b", "question": "What river does the Arlen Bridge cross?",
                    "answer": "Tavy", "type": "bridge", "level": "easy",
                    "supporting_facts": [["Arlen Bridge", 0]], "context": "The Arlen Bridge crosses the Tavy."}
BAD_TITLE = {"_id": "5ac2ada5554299657fd28f35", "question": "In which county is Merrow?", "answer": "Devon",
             "type": "bridge", "level": "easy", "supporting_facts": [["Merrow town", 0]], "context": [MERROW]}
TWO_WIKI = {"_id": "8f1a2b4c0bdd11eba7f7acde48001122", "question": "Who was born first, Edith Carrow or the builder of Tavy Hall?",
            "answer": "Edith Carrow", "type": "bridge_comparison",
            "supporting_facts": [["Edith Carrow", 0], ["Tavy Hall", 0]], "context": [CARROW, HALL],
            "evidences": [["Edith Carrow", "date of birth", "1849"], ["Tavy Hall", "inception", "1962"]]}
INVALID_LINE = '{"_id": "5a8c7595554299585d9e36b6", "question": "Is Merrow in Devon?", "answer": "yes", '


def _jsonl(path, records_or_lines):
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records_or_lines]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def hotpot_jsonl(tmp_path):
    return _jsonl(tmp_path / "hotpot.jsonl", [GOOD_BRIDGE, NO_ANSWER, CONTEXT_NOT_LIST, INVALID_LINE,
                                              GOOD_COMPARISON, BAD_TITLE, TWO_WIKI])


def _by_id(table, key):
    return {r[key]: r for r in table.to_pylist()}


def test_hotpot_jsonl_imports_good_and_reports_bad(hotpot_jsonl, tmp_path):
    root = tmp_path / "data"
    rep = import_file(hotpot_jsonl, root, "hp")
    assert (rep.records, rep.imported, rep.container) == (7, 3, "jsonl")
    rejects = {(r["where"], r["_id"]): r["reason"] for r in rep.rejects}
    assert set(rejects) == {("line 2", NO_ANSWER["_id"]), ("line 3", CONTEXT_NOT_LIST["_id"]),
                            ("line 4", "5a8c7595554299585d9e36b6"), ("line 6", BAD_TITLE["_id"])}
    assert rejects[("line 2", NO_ANSWER["_id"])] == "missing answer"
    assert "context is not a list" in rejects[("line 3", CONTEXT_NOT_LIST["_id"])]
    assert rejects[("line 4", "5a8c7595554299585d9e36b6")].startswith("invalid JSON")
    assert "'Merrow town' is not in the context" in rejects[("line 6", BAD_TITLE["_id"])]
    saved = [json.loads(l) for l in (root / "hp" / "_runs" / f"{rep.run_id}.rejects.jsonl").read_text().splitlines()]
    assert [(r["where"], r["_id"]) for r in saved] == [(r["where"], r["_id"]) for r in rep.rejects]

    triples = _by_id(load_table("hp", "triples", root), "triple_id")
    docs = _by_id(load_table("hp", "documents", root), "doc_id")
    assert set(triples) == {GOOD_BRIDGE["_id"], GOOD_COMPARISON["_id"], TWO_WIKI["_id"]}
    arlen_text = "The Arlen Bridge is a stone arch bridge over the Tavy river in Merrow. It was completed in 1887 " \
                 "to a design by Edith Carrow."
    arlen = doc_id("Arlen Bridge", arlen_text)
    assert docs[arlen]["text"] == arlen_text
    # Arlen, Carrow, Merrow, Plymouth, Tavy Hall: shared paragraphs stored once
    assert len(docs) == rep.documents == 5
    b = triples[GOOD_BRIDGE["_id"]]
    assert b["golden_doc_ids"] == [arlen, doc_id("Edith Carrow", join_sentences(CARROW[1]))]
    assert b["hop_count"] == 2 and b["qtype"] == "bridge" and b["answer"] == "Plymouth" and b["aliases"] == []
    assert b["supporting_facts"][0] == {"doc_id": arlen, "sentence": "It was completed in 1887 to a design by Edith Carrow."}
    assert json.loads(b["meta"])["level"] == "medium"
    w = triples[TWO_WIKI["_id"]]
    assert w["qtype"] == "bridge_comparison" and len(json.loads(w["meta"])["evidences"]) == 2
    assert set(load_table("hp", "documents", root).column("source").to_pylist()) == {"import:hotpot.jsonl"}


def test_same_records_as_json_array(tmp_path):
    path = tmp_path / "hotpot.json"
    path.write_text("  \n" + json.dumps([GOOD_BRIDGE, NO_ANSWER, CONTEXT_NOT_LIST, GOOD_COMPARISON, BAD_TITLE],
                                        indent=1))
    assert detect_container(path) == "json_array"
    rep = import_file(path, tmp_path / "data", "hp")
    assert rep.imported == 2
    assert [(r["where"], r["_id"]) for r in rep.rejects] == [
        ("index 1", NO_ANSWER["_id"]), ("index 2", CONTEXT_NOT_LIST["_id"]), ("index 4", BAD_TITLE["_id"])]


def test_reimport_writes_no_duplicates(hotpot_jsonl, tmp_path):
    root = tmp_path / "data"
    first = import_file(hotpot_jsonl, root, "hp")
    again = import_file(hotpot_jsonl, root, "hp")
    assert first.run_id == again.run_id
    assert first.written == {"documents": 5, "triples": 3}
    assert again.written == {"documents": 0, "triples": 0}
    assert load_table("hp", "triples", root).num_rows == 3
    assert load_table("hp", "documents", root).num_rows == 5


PLAIN = [
    {"id": "q1", "question": "What is the capital of Merrow county?", "answer": "Merrow",
     "aliases": ["Merrow town", "Merrow"], "golden_context": ["Merrow is the county seat.", "The county is in Devon."]},
    {"question": "Who designed the Arlen Bridge?", "answer": "Edith Carrow",
     "context": "The Arlen Bridge was designed by Edith Carrow.", "type": "single"},
    {"question": "Who opened Tavy Hall?", "answer": "The mayor", "context": [{"title": "Tavy Hall", "text": "The mayor opened Tavy Hall."},
                                                                         ["Merrow", "Merrow has a mayor."]], "hop_count": 2},
    {"question": "Broken?", "answer": "x", "aliases": "x"},
]


def test_plain_jsonl(tmp_path):
    path = _jsonl(tmp_path / "plain.jsonl", PLAIN)
    rep = import_file(path, tmp_path / "data", "pl")
    assert rep.imported == 3
    assert rep.rejects == [{"where": "line 4", "_id": None, "reason": "missing context (golden_context or context)"}]
    rows = load_table("pl", "triples", tmp_path / "data").to_pylist()
    by_q = {r["question"]: r for r in rows}
    q1 = by_q[PLAIN[0]["question"]]
    assert q1["triple_id"] == "q1" and q1["aliases"] == ["Merrow town"] and q1["hop_count"] == 2
    assert len(q1["golden_doc_ids"]) == 2 and q1["qtype"] == "unknown"
    q2 = by_q[PLAIN[1]["question"]]
    assert q2["hop_count"] == 1 and q2["qtype"] == "single" and q2["triple_id"].startswith("tri-")
    q3 = by_q[PLAIN[2]["question"]]
    titles = {r["doc_id"]: r["title"] for r in load_table("pl", "documents", tmp_path / "data").to_pylist()}
    assert [titles[d] for d in q3["golden_doc_ids"]] == ["Tavy Hall", "Merrow"] and q3["hop_count"] == 2


def test_parquet_plain_and_hf_hotpot_layout(tmp_path):
    hf = {"id": "hf1", "question": GOOD_BRIDGE["question"], "answer": "Plymouth", "type": "bridge",
          "level": "medium",
          "supporting_facts": {"title": ["Arlen Bridge", "Edith Carrow"], "sent_id": [1, 1]},
          "context": {"title": [ARLEN[0], CARROW[0]], "sentences": [ARLEN[1], CARROW[1]]}}
    path = tmp_path / "hf.parquet"
    pq.write_table(pa.Table.from_pylist([hf, {**hf, "id": "hf2", "answer": None}]), path)
    rep = import_file(path, tmp_path / "data", "pq")
    assert rep.container == "parquet" and rep.imported == 1
    assert rep.rejects == [{"where": "row 1", "_id": "hf2", "reason": "missing answer"}]
    t = load_table("pq", "triples", tmp_path / "data").to_pylist()[0]
    assert t["triple_id"] == "hf1" and t["hop_count"] == 2
    assert t["supporting_facts"][1]["sentence"] == "She was born in Plymouth and trained under her father."

    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.Table.from_pylist([{"question": p["question"], "answer": p["answer"],
                                          "golden_context": [p["golden_context"] if "golden_context" in p else "x"][0]}
                                         for p in PLAIN[:1]]), plain)
    rep = import_file(plain, tmp_path / "data", "pq2")
    assert rep.imported == 1 and load_table("pq2", "documents", tmp_path / "data").num_rows == 2


def test_json_array_streams_in_small_chunks():
    records = [GOOD_BRIDGE, {"n": 12345678901234567890}, TWO_WIKI, [1, 2], {"s": "a]b,c\\\"d"}]
    text = json.dumps(records, indent=2)
    got = list(iter_json_array(io.StringIO(text), chunk=7))
    assert [g.record for g in got if g.record] == [r for r in records if isinstance(r, dict)]
    assert got[3].error.startswith("record is a JSON list")
    broken = list(iter_json_array(io.StringIO(text[:-8]), chunk=16))  # cut inside the last object
    assert broken[-1].error.startswith("invalid JSON") and broken[-1].where == "index 4"
    assert [r.where for r in iter_json_array(io.StringIO("[]"))] == []


def test_normalise_rules():
    with pytest.raises(RecordError, match="out of range"):
        normalise({**GOOD_BRIDGE, "supporting_facts": [["Arlen Bridge", 5]]})
    with pytest.raises(RecordError, match="missing supporting_facts"):
        normalise({k: v for k, v in GOOD_BRIDGE.items() if k != "supporting_facts"}, style="hotpot")
    docs, t = normalise({k: v for k, v in GOOD_BRIDGE.items() if k != "supporting_facts"}, style="auto")
    assert t["hop_count"] == 4 and len(docs) == 4  # plain: all context is golden
    with pytest.raises(RecordError, match="empty question"):
        normalise({**GOOD_BRIDGE, "question": "  "})
    assert join_sentences(["A b.", "C d."]) == "A b. C d."
    assert join_sentences(["A b.", " C d."]) == "A b. C d."


def test_gzip_jsonl(tmp_path):
    import gzip

    path = tmp_path / "h.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps(GOOD_BRIDGE) + "\n")
    assert [r.record["_id"] for r in iter_records(path)] == [GOOD_BRIDGE["_id"]]

"""The world corpus: determinism, fact round trip through the text, derivability of every
triple from its golden documents, hop counts and unambiguous questions."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from generators.corpus.build import WorldConfig, allocate, generate, parse_mix, write
from generators.corpus.derive import EXTRACTOR, FactBase, check_triple, split_sentences
from generators.corpus.names import NAME_RE
from storage.reader import load_table

ROOT = Path(__file__).resolve().parents[2]


def _digest(corpus) -> str:
    rows = sorted(json.dumps(r, sort_keys=True) for r in corpus.document_rows + corpus.triple_rows)
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()


@pytest.fixture(scope="module")
def c500():
    return generate(WorldConfig(seed=5, entities=500))


@pytest.fixture(scope="module")
def docs500(c500):
    return {r["doc_id"]: (r["title"], r["text"]) for r in c500.document_rows}


def test_same_seed_same_bytes_other_seed_differs():
    a = generate(WorldConfig(seed=3, entities=300))
    b = generate(WorldConfig(seed=3, entities=300))
    c = generate(WorldConfig(seed=4, entities=300))
    assert _digest(a) == _digest(b)
    assert _digest(a) != _digest(c)
    assert {r["title"] for r in a.document_rows} != {r["title"] for r in c.document_rows}


def test_deterministic_across_processes_and_hash_seeds():
    code = ("import hashlib, json; from generators.corpus.build import WorldConfig, generate; "
            "c = generate(WorldConfig(seed=9, entities=150)); "
            "rows = sorted(json.dumps(r, sort_keys=True) for r in c.document_rows + c.triple_rows); "
            "print(hashlib.sha256('\\n'.join(rows).encode()).hexdigest())")
    outs = set()
    for hash_seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        outs.add(subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                                text=True, check=True).stdout.strip())
    assert len(outs) == 1
    assert outs == {_digest(generate(WorldConfig(seed=9, entities=150)))}


def test_names_unique_and_parseable(c500):
    names = [e.name for e in c500.world.entities]
    assert len(names) == len(set(names)) == 500
    assert all(NAME_RE.match(n) and not n.startswith("The ") for n in names)
    assert len({r["doc_id"] for r in c500.document_rows}) == 500
    assert Counter(e.type for e in c500.world.entities).keys() == {
        "country", "city", "person", "org", "work", "event", "concept"}


def test_every_fact_reads_back_from_the_text(c500):
    w = c500.world
    for doc in c500.docs.values():
        e = w.by_id[doc.entity_id]
        assert doc.sentences[0].startswith(e.name) or e.name in doc.sentences[0]
        assert split_sentences(doc.text) == doc.sentences
        got: dict = {}
        for s in doc.sentences:
            found = EXTRACTOR.matches(s)
            assert len(found) <= 1, s  # no sentence fits two templates
            # the anchor-word index finds exactly what trying every template finds
            assert [t for t, _ in found] == [t for t in EXTRACTOR.templates if t.compiled[0].match(s)]
            for f in EXTRACTOR.sentence_facts(s, doc.title):
                if f.rel.startswith("~"):  # inverse mention: must be true, about this entity
                    assert f.subject == e.name
                    assert all(w.by_name[v].facts[f.rel[1:]] == e.id for v in f.value)
                else:
                    got.setdefault((f.subject, f.rel), []).append(f.value)
        assert got == {(e.name, r): [w.value(e, r)] for r in e.facts}, doc.text


def test_every_triple_derives_from_its_golden_docs_alone(c500, docs500):
    assert len(c500.triple_rows) == 250
    for t in c500.triple_rows:
        golden_only = {d: docs500[d] for d in t["golden_doc_ids"]}
        res = check_triple(t, golden_only)
        assert res.ok, (t["question"], res.reason)
        # the supporting sentences alone carry every needed fact
        support: dict = {}
        for sf in t["supporting_facts"]:
            support.setdefault(sf["doc_id"], []).append(sf["sentence"])
            assert sf["sentence"] in split_sentences(docs500[sf["doc_id"]][1])
        only_support = {d: (docs500[d][0], " ".join(s)) for d, s in support.items()}
        assert check_triple(t, only_support).ok, t["question"]


def test_each_golden_doc_is_needed(c500, docs500):
    for t in c500.triple_rows:
        for g in t["golden_doc_ids"]:
            rest = {d: docs500[d] for d in t["golden_doc_ids"] if d != g}
            res = check_triple(t, rest)
            assert not res.ok and "no fact" in res.reason, (t["question"], g)


def test_broken_triples_are_caught(c500, docs500):
    by_type = {t["qtype"]: t for t in c500.triple_rows}
    for t in by_type.values():
        wrong = {**t, "answer": t["answer"] + "x"}
        res = check_triple(wrong, docs500)
        assert not res.ok and "derived" in res.reason
        assert res.derived == t["answer"]
        dropped = {**t, "golden_doc_ids": t["golden_doc_ids"][1:] or ["doc-missing"]}
        assert not check_triple(dropped, docs500).ok
    # a bridge triple whose golden text states a different year fails too
    t = next(t for t in c500.triple_rows if t["qtype"] == "bridge" and t["answer"].isdigit() and len(t["answer"]) == 4)
    last = t["golden_doc_ids"][-1]
    title, text = docs500[last]
    edited = {**docs500, last: (title, text.replace(t["answer"], str(int(t["answer"]) + 1)))}
    res = check_triple(t, edited)
    assert not res.ok
    # a program that asks for a relation nobody stated
    meta = json.loads(t["meta"])
    meta["program"][-1][1] = "tracks" if meta["program"][-1][1] != "tracks" else "chapters"
    assert not check_triple({**t, "meta": json.dumps(meta)}, docs500).ok


def test_hop_counts_and_golden_docs(c500):
    qtypes = Counter(t["qtype"] for t in c500.triple_rows)
    assert set(qtypes) == {"bridge", "comparison", "compositional", "inference"}
    assert qtypes == allocate(250, parse_mix("bridge=0.4,comparison=0.2,compositional=0.2,inference=0.2"))
    bridge_hops = Counter()
    for t in c500.triple_rows:
        g = t["golden_doc_ids"]
        assert len(g) == len(set(g)) == t["hop_count"]
        assert 1 < t["hop_count"] <= 4
        meta = json.loads(t["meta"])
        if t["qtype"] == "bridge":
            assert len(meta["program"]) == t["hop_count"]  # one relation per hop
            bridge_hops[t["hop_count"]] += 1
        assert {sf["doc_id"] for sf in t["supporting_facts"]} == set(g)
    assert set(bridge_hops) == {2, 3, 4}


def test_questions_are_unambiguous(c500):
    rows = c500.triple_rows
    assert len({t["question"] for t in rows}) == len(rows)
    assert len({t["triple_id"] for t in rows}) == len(rows)
    # every relation stated anywhere in the corpus is functional
    facts = FactBase.from_docs([(d.title, d.text) for d in c500.docs.values()])
    for (subject, rel), found in facts.facts.items():
        if not rel.startswith("~"):
            assert len(found) == 1, (subject, rel, found)
    w = c500.world
    for t in rows:
        meta = json.loads(t["meta"])
        prog = meta["program"]
        if t["qtype"] == "comparison":
            values = []
            for cand in prog["candidates"]:
                cur = w.by_name[cand["chain"][0][0]]
                for _, rel in cand["chain"][:-1]:
                    cur = w.by_id[cur.facts[rel]]
                values.append(cur.facts[cand["chain"][-1][1]])
            assert len(set(values)) == 2  # never a tie
            assert t["answer"] in [c["answer"] for c in prog["candidates"]]


def test_answers_and_aliases(c500):
    w = c500.world
    seen = set()
    for t in c500.triple_rows:
        a, al = t["answer"], t["aliases"]
        assert a not in al
        if t["qtype"] == "compositional":
            assert a.isdigit() and f"{a} years" in al or a == "1"
            seen.add("years")
        elif a in ("yes", "no"):
            seen.add(a)
        elif a.isdigit() and len(a) == 4 and 800 < int(a) < 2100 and f"in {a}" in al:
            seen.add("year")
        elif a in w.by_name:
            e = w.by_name[a]
            if e.type == "person":
                assert al == [e.surname]
                seen.add("person")
            if e.type == "country":
                assert e.facts["official_name"] in al
                seen.add("country")
    assert {"years", "yes", "no", "year", "person", "country"} <= seen
    inference = Counter(t["answer"] for t in c500.triple_rows if t["answer"] in ("yes", "no"))
    assert 0.25 < inference["yes"] / sum(inference.values()) < 0.75


def test_mix_count_and_errors():
    c = generate(WorldConfig(seed=1, entities=120, triples=30, qtypes={"bridge": 1}))
    assert [t["qtype"] for t in c.triple_rows] == ["bridge"] * 30
    assert allocate(10, {"bridge": 0.5, "comparison": 0.5}) == {"bridge": 5, "comparison": 5}
    assert sum(allocate(7, parse_mix("bridge=1,comparison=1,inference=1")).values()) == 7
    with pytest.raises(ValueError, match="unknown question type"):
        parse_mix("bridge=1,riddle=2")
    with pytest.raises(ValueError, match="not a number"):
        parse_mix("bridge=lots")
    with pytest.raises(ValueError, match="at least"):
        generate(WorldConfig(seed=1, entities=10))


def test_write_is_idempotent_and_records_config(tmp_path):
    cfg = WorldConfig(seed=2, entities=100, triples=20)
    corpus, run_id, written = write(cfg, tmp_path, "w")
    assert written == {"documents": 100, "triples": 20}
    assert run_id == f"world-{cfg.config_hash()[:12]}"
    _, _, again = write(cfg, tmp_path, "w")
    assert again == {"documents": 0, "triples": 0}
    docs = load_table("w", "documents", tmp_path)
    triples = load_table("w", "triples", tmp_path)
    assert docs.num_rows == 100 and triples.num_rows == 20
    assert set(docs.column("source").to_pylist()) == {"world:seed=2"}
    lineage = triples.column("lineage").to_pylist()
    assert all(l["config_hash"] == cfg.config_hash() and len(l["parent_ids"]) >= 2 for l in lineage)
    doc_row_ids = set(docs.column("id").to_pylist())
    assert all(set(l["parent_ids"]) <= doc_row_ids for l in lineage)
    saved = json.loads((tmp_path / "w" / "_runs" / f"{run_id}.json").read_text())
    assert saved["config"]["seed"] == 2 and saved["config"]["triples"] == 20

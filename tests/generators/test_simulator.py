"""Tests of the BM25 tool simulator on a small hand-written corpus (30 documents, 6 entity
types plus untyped imported passages). Run: .venv/bin/python -m pytest tests/generators/test_simulator.py -q
"""

from __future__ import annotations

import json

import pytest

from generators.tools.base import base_rows
from generators.tools.simulator import SimConfig, Simulator
from generators.tools.snippets import split_sentences


def _doc(doc_id, title, text, etype=None):
    meta = json.dumps({"entity_type": etype}) if etype else None
    return {"doc_id": doc_id, "title": title, "text": text, "source": "test", "meta": meta}


DOCS = [
    _doc("p1", "Alira Venmoth", "Alira Venmoth was a Corvanian chemist. She was born in Taldis in 1887. "
         "Venmoth studied at the University of Oskar. She discovered the Venmoth reaction.", "person"),
    _doc("p2", "Borin Kest", "Borin Kest was a painter from Marrow Bay. Kest was born in 1902 in Marrow Bay. "
         "He painted The Grey Harbour. Kest married the poet Sela Dunmore.", "person"),
    _doc("p3", "Sela Dunmore", "Sela Dunmore was a poet. Dunmore was born in Taldis in 1905. "
         "Her best known book is Songs of the Ferrow. She taught at the University of Oskar.", "person"),
    _doc("p4", "Tomas Reyl", "Tomas Reyl was a Corvanian general. Reyl was born in Eskar in 1850. "
         "He led the army at the Battle of Ferrow Ford. Reyl died in 1911.", "person"),
    _doc("p5", "Imra Solvane", "Imra Solvane is an astronomer. Solvane was born in Quell in 1961. "
         "She described the Solvane drift. Solvane directs the Quell Observatory.", "person"),
    _doc("l1", "Taldis", "Taldis is a city in Corvania. Taldis lies on the river Ferrow. "
         "The city was founded in 1204. Its population is about 80,000.", "place"),
    _doc("l2", "Marrow Bay", "Marrow Bay is a fishing town in Estland. Marrow Bay lies on the Grey Sea. "
         "The town is known for its harbour and lighthouse.", "place"),
    _doc("l3", "Eskar", "Eskar is a mountain village in Corvania. Eskar sits below Mount Vell. "
         "Eskar has about 900 inhabitants.", "place"),
    _doc("l4", "Quell", "Quell is a city in Estland. Quell is home to the Quell Observatory. "
         "The city was founded in 1420.", "place"),
    _doc("l5", "River Ferrow", "The Ferrow is a river in Corvania. The Ferrow flows through Taldis. "
         "The river is 310 km long.", "place"),
    _doc("o1", "University of Oskar", "The University of Oskar is a university in Taldis. "
         "It was founded in 1650 by Oskar Brant. Alira Venmoth and Sela Dunmore studied or taught there.",
         "organisation"),
    _doc("o2", "Quell Observatory", "The Quell Observatory is a research institute in Quell. "
         "It was founded in 1890. Imra Solvane is its director.", "organisation"),
    _doc("o3", "Grey Sea Shipping", "Grey Sea Shipping is a company based in Marrow Bay. "
         "It was founded in 1921 by Hallam Kest, the brother of Borin Kest.", "organisation"),
    _doc("o4", "Ferrow Players", "The Ferrow Players are a theatre troupe from Taldis. "
         "The troupe was founded in 1930. They staged Songs of the Ferrow.", "organisation"),
    _doc("o5", "Corvanian Army", "The Corvanian Army is the army of Corvania. "
         "Its most famous commander was Tomas Reyl.", "organisation"),
    _doc("w1", "The Grey Harbour", "The Grey Harbour is a painting by Borin Kest. It was finished in 1931. "
         "The painting shows the harbour of Marrow Bay.", "work"),
    _doc("w2", "Songs of the Ferrow", "Songs of the Ferrow is a book of poems by Sela Dunmore. "
         "It was published in 1934 by Taldis Press.", "work"),
    _doc("w3", "Lantern Road", "Lantern Road is a film directed by Orin Pask. It was released in 1958. "
         "The film is set in Quell.", "work"),
    _doc("w4", "The Vell Suite", "The Vell Suite is an album by the Ferrow Players. It came out in 1977.", "work"),
    _doc("w5", "Salt and Iron", "Salt and Iron is a novel by Hallam Kest. It was published in 1948.", "work"),
    _doc("e1", "Battle of Ferrow Ford", "The Battle of Ferrow Ford was fought in 1881 near Taldis. "
         "Tomas Reyl led the Corvanian Army. The battle ended the Ferrow war.", "event"),
    _doc("e2", "Great Flood of Taldis", "The Great Flood of Taldis happened in 1926. "
         "The river Ferrow rose over its banks. Much of the old town was destroyed.", "event"),
    _doc("e3", "Quell Exhibition", "The Quell Exhibition was a world fair held in Quell in 1899.", "event"),
    _doc("e4", "Treaty of Eskar", "The Treaty of Eskar was signed in Eskar in 1883. It ended the Ferrow war.", "event"),
    _doc("s1", "Venmoth reaction", "The Venmoth reaction is a chemical reaction. "
         "It was discovered by Alira Venmoth in 1921. It turns iron salts into pigments.", "science"),
    _doc("s2", "Solvane drift", "The Solvane drift is a slow motion of stars in the Vell cluster. "
         "It was described by Imra Solvane in 1994.", "science"),
    _doc("s3", "Ferrow clay", "Ferrow clay is a mineral found along the river Ferrow. "
         "It was first analysed in 1860.", "science"),
    _doc("u1", "Harbour lights", "Harbour lights are signals used at night in ports such as Marrow Bay."),
    _doc("u2", "Corvanian cuisine", "Corvanian cuisine uses Ferrow fish and river herbs. Taldis is its centre."),
    _doc("u3", "Kest family", "The Kest family comes from Marrow Bay. Borin Kest and Hallam Kest were brothers."),
]
TYPE = {d["doc_id"]: (json.loads(d["meta"])["entity_type"] if d["meta"] else None) for d in DOCS}
SUPPORT = ["She was born in Taldis in 1887."]


@pytest.fixture(scope="module")
def sim():
    return Simulator(DOCS, seed=7)


def ids(out: str) -> list[str]:
    return [r["doc_id"] for r in json.loads(out)["results"]]


def test_same_call_is_byte_identical_and_seeded(sim):
    args = {"query": "Alira Venmoth birthplace", "top_k": 4}
    a = sim.call("search_person", args, golden_doc_ids=["p1"], mode="good", supporting=SUPPORT)
    b = sim.call("search_person", dict(reversed(list(args.items()))), golden_doc_ids=["p1"], mode="good",
                 supporting=SUPPORT)
    fresh = Simulator(list(reversed(DOCS)), seed=7)
    c = fresh.call("search_person", args, golden_doc_ids=["p1"], mode="good", supporting=SUPPORT)
    assert a == b == c
    # different seeds give different shuffles for at least one of several calls
    other = Simulator(DOCS, seed=8)
    queries = ["Taldis", "Marrow Bay harbour", "Ferrow war", "born in 1887", "poet"]
    differ = [other.call("general_search", {"query": q, "top_k": 6}, golden_doc_ids=["l1"], mode="good")
              != sim.call("general_search", {"query": q, "top_k": 6}, golden_doc_ids=["l1"], mode="good")
              for q in queries]
    assert any(differ)


def test_good_has_golden_with_supporting_fact_and_distractors(sim):
    out = sim.call("search_person", {"query": "Alira Venmoth born"}, golden_doc_ids=["p1"], mode="good",
                   supporting=SUPPORT)
    res = json.loads(out)["results"]
    got = [r["doc_id"] for r in res]
    assert "p1" in got and len(got) == 5 and len(set(got)) == 5
    assert SUPPORT[0] in next(r["snippet"] for r in res if r["doc_id"] == "p1")
    # multi-golden with a small top_k still returns all golden passages (general tool sees all types)
    out2 = sim.call("general_search", {"query": "Dunmore book", "top_k": 1}, golden_doc_ids=["p3", "w2"], mode="good")
    assert set(ids(out2)) == {"p3", "w2"}


def test_bad_has_no_golden_and_hard_negatives(sim):
    out = sim.call("search_person", {"query": "Alira Venmoth born in Taldis"}, golden_doc_ids=["p1"], mode="bad",
                   supporting=SUPPORT, answers=["Taldis"])
    got = ids(out)
    assert got and "p1" not in got
    assert all(TYPE[d] in ("person", None) for d in got)
    assert "p3" in got  # Sela Dunmore also born in Taldis: a lexical hard negative
    assert "taldis" not in out.lower()  # answer sentences from other docs are hidden too
    wide = sim.call("general_search", {"query": "Alira Venmoth born in Taldis", "top_k": 10}, golden_doc_ids=["p1"],
                    mode="bad", supporting=SUPPORT, answers=["Taldis"])
    assert ids(wide) and "l1" not in ids(wide) and "taldis" not in wide.lower()  # no page named after the answer


def test_insufficient_lacks_the_supporting_fact(sim):
    out = sim.call("search_person", {"query": "Alira Venmoth birthplace"}, golden_doc_ids=["p1"],
                   mode="insufficient", supporting=SUPPORT, answers=["Taldis"])
    res = json.loads(out)["results"]
    assert res
    text = " ".join(r["snippet"] for r in res)
    assert "born in Taldis in 1887" not in text and "Taldis" not in text
    p1 = [r for r in res if r["doc_id"] == "p1"]
    assert p1 and "Venmoth" in p1[0]["snippet"]  # related passage is there, the fact is not
    # without supporting sentences or answers the golden doc is left out entirely
    blind = sim.call("search_person", {"query": "Alira Venmoth"}, golden_doc_ids=["p1"], mode="insufficient")
    assert "p1" not in ids(blind)
    assert all(len(r["snippet"]) <= SimConfig().insufficient_chars for r in json.loads(blind)["results"])


@pytest.mark.parametrize("domain", ["person", "place", "organisation", "work", "event", "science"])
def test_domain_tools_only_return_their_domain(sim, domain):
    base = next(r["name"] for r in base_rows() if r["domain"] == domain)
    for mode in ("good", "bad", "insufficient"):
        out = sim.call(base, {"query": "Taldis Ferrow Kest Quell 1887", "top_k": 10}, golden_doc_ids=["p1"],
                       mode=mode, supporting=SUPPORT)
        assert ids(out)
        assert all(TYPE[d] in (domain, None) for d in ids(out)), (mode, out)
    assert all(TYPE[h["doc_id"]] in (domain, None) for h in sim.search("Taldis Ferrow", k=30, domain=domain))


def test_golden_outside_the_tool_domain_is_not_returned(sim):
    # the "wrong tool" case: a place tool cannot find a person's page
    out = sim.call("search_place", {"query": "Alira Venmoth"}, golden_doc_ids=["p1"], mode="good")
    assert "p1" not in ids(out) and not sim.visible("search_place", "p1") and sim.domain_of("p1") == "person"
    assert sim.domain_of("u1") == "general" and sim.visible("search_place", "u1")


def test_invalid_arguments_and_unknown_tool(sim):
    cases = [{}, {"query": "x", "top_k": 50}, {"query": "x", "birthday": "1887"}, {"query": 3}, ["query"]]
    for args in cases:
        out = sim.call("search_person", args, golden_doc_ids=["p1"], mode="good")
        err = json.loads(out)
        assert err["error"] == "invalid_arguments" and err["detail"], args
        assert out == sim.call("search_person", args, golden_doc_ids=["p1"], mode="good")
    assert "query" in json.loads(sim.call("search_person", {}, golden_doc_ids=[], mode="bad"))["detail"]
    assert json.loads(sim.call("search_weather", {"query": "rain"}))["error"] == "unknown_tool"
    with pytest.raises(ValueError):
        sim.call("search_person", {"query": "x"}, golden_doc_ids=["nope"], mode="good")


def test_variant_tools_and_domain_names_are_callable():
    variant = {"tool_id": "v1", "domain": "work", "name": "find_artwork", "description": "Find works.",
               "json_schema": json.dumps({"type": "object", "properties": {"query": {"type": "string"}},
                                          "required": ["query"], "additionalProperties": False}),
               "variant_of": "x", "meta": None}
    s = Simulator(DOCS, seed=1, tools=[variant])
    out = s.call("find_artwork", {"query": "painting harbour"}, golden_doc_ids=["w1"], mode="good")
    assert "w1" in ids(out) and all(TYPE[d] in ("work", None) for d in ids(out))
    assert s.call("work", {"query": "painting harbour"}, golden_doc_ids=["w1"], mode="good") == \
        s.call("work", {"query": "painting harbour"}, golden_doc_ids=["w1"], mode="good")
    assert json.loads(s.call("find_artwork", {"query": "x", "year": 1931}))["error"] == "invalid_arguments"


def test_search_ranks_by_bm25_with_stable_ties(sim):
    hits = sim.search("Solvane drift", k=3)
    assert hits[0]["doc_id"] == "s2" and hits[0]["score"] >= hits[-1]["score"]
    assert sim.search("zzzz unknownword") == []
    assert sim.search("", k=3) == []
    tie = Simulator([_doc("b", "same", "alpha beta"), _doc("a", "same", "alpha beta")], seed=0)
    assert [h["doc_id"] for h in tie.search("alpha", k=2)] == ["a", "b"]


def test_split_sentences_keeps_wording():
    assert split_sentences("He was born in 1902. Kest painted it! Is it? yes.") == \
        ["He was born in 1902.", "Kest painted it!", "Is it? yes."]


def test_corrupted_arguments_always_get_the_error(sim):
    import random

    from generators.tools.arguments import MISTAKES, corrupt_arguments

    rng = random.Random(0)
    for row in base_rows():
        for kind in MISTAKES + (None,):
            bad, used = corrupt_arguments(row, {"query": "Alira Venmoth", "top_k": 3}, kind, rng)
            assert used in MISTAKES and (kind is None or used in (kind, "wrong_type"))
            err = json.loads(sim.call(row["name"], bad, golden_doc_ids=["p1"], mode="good"))
            assert err["error"] == "invalid_arguments", (row["name"], kind, bad)
    # the same rng state gives the same corruption
    a = corrupt_arguments(base_rows()[0], {"query": "q"}, None, random.Random(5))
    assert a == corrupt_arguments(base_rows()[0], {"query": "q"}, None, random.Random(5))

"""Rule checks for triples and tasks: every triple of a real world corpus (and a task built
from each bridge triple's golden path) passes; corrupted copies are each rejected with the
expected, documented reason code (real derivation over the golden documents' text); any
input gets documented verdicts and never crashes the rules (hypothesis)."""

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import load_table
from validators.reasons import REASONS
from validators.trajectory_rules import RuleContext, check_record
from validators.validator import ValidateConfig, Validator
from validators.schema_layer import check_schema


def first_fail(row, kind, ctx):
    v = check_schema(row, kind)
    if not v.passed:
        return v
    return next((x for x in check_record(row, kind, ctx) if not x.passed), None)


@pytest.fixture(scope="module")
def corpus(world):
    root = world[0]
    docs = {d["doc_id"]: (d["title"], d["text"]) for d in load_table("w", "documents", root).to_pylist()}
    triples = load_table("w", "triples", root).to_pylist()
    return triples, RuleContext(documents=docs)


def task_of(t: dict, docs) -> dict:
    """An examiner-style task following a bridge triple's golden documents hop by hop."""
    return {"task_id": "k-" + t["triple_id"], "question": t["question"], "answer": t["answer"], "aliases": t["aliases"],
            "qcp": {"seed_doc_id": t["golden_doc_ids"][0],
                    "hops": [{"query": docs[d][0], "doc_ids": [d], "note": f"hop {i}"} for i, d in enumerate(t["golden_doc_ids"])]},
            "hop_count": len(t["golden_doc_ids"]), "examiner_step": 1, "meta": None}


def test_every_world_triple_and_task_passes(corpus):
    triples, ctx = corpus
    assert len(triples) >= 50 and {t["qtype"] for t in triples} == {"bridge", "comparison", "compositional", "inference"}
    for t in triples:
        assert first_fail(t, "triples", ctx) is None, (t["question"], first_fail(t, "triples", ctx))
        vs = check_record(t, "triples", ctx)
        assert [v.check for v in vs] == ["fields", "golden", "leak", "documents", "derive"]
        assert vs[-1].reason == "ok" and vs[-1].detail["derived"] == t["answer"]  # really re-derived
    bridges = [task_of(t, ctx.documents) for t in triples if t["qtype"] == "bridge"]
    assert len(bridges) >= 10
    for k in bridges:
        assert first_fail(k, "tasks", ctx) is None, (k["question"], first_fail(k, "tasks", ctx))


def set_(key, value):
    return lambda r: r.__setitem__(key, value)


def drop_last_golden(r):
    gone = r["golden_doc_ids"].pop()
    r["supporting_facts"] = [sf for sf in r["supporting_facts"] if sf["doc_id"] != gone]
    r["hop_count"] = len(r["golden_doc_ids"])


def rename_golden(r):
    old = r["golden_doc_ids"][0]
    r["golden_doc_ids"][0] = "doc-nope"
    for sf in r["supporting_facts"]:
        if sf["doc_id"] == old:
            sf["doc_id"] = "doc-nope"


def set_program(r, program):
    r["meta"] = json.dumps({**json.loads(r["meta"]), "program": program})


def hop(i, key, value):
    return lambda r: r["qcp"]["hops"][i].__setitem__(key, value)


TRIPLE_CASES = [
    # (id, base qtype, mutation, expected reason)
    ("blank_question", "bridge", set_("question", "   "), "question_blank"),
    ("blank_answer", "bridge", set_("answer", " "), "answer_blank"),
    ("no_golden_docs", "bridge", set_("golden_doc_ids", []), "schema_violation"),
    ("golden_twice", "bridge", lambda r: r["golden_doc_ids"].append(r["golden_doc_ids"][0]), "golden_doc_duplicate"),
    ("more_hops_than_docs", "bridge", lambda r: r.__setitem__("hop_count", len(r["golden_doc_ids"]) + 1), "hop_count_mismatch"),
    ("support_from_other_doc", "bridge", lambda r: r["supporting_facts"][0].__setitem__("doc_id", "doc-other"), "support_not_golden"),
    ("answer_in_question", "bridge", lambda r: r.__setitem__("question", r["question"].rstrip("?") + f" (it is {r['answer']})?"), "answer_in_question"),
    ("golden_doc_missing", "bridge", rename_golden, "golden_doc_missing"),
    ("support_sentence_altered", "bridge", lambda r: r["supporting_facts"][0].__setitem__("sentence", "Nothing of the sort."), "support_sentence_missing"),
    ("wrong_answer", "bridge", set_("answer", "Quentin Zarvox"), "derived_answer_mismatch"),
    ("comparison_answer_swapped", "comparison", lambda r: r.__setitem__(
        "answer", next(c["answer"] for c in json.loads(r["meta"])["program"]["candidates"] if c["answer"] != r["answer"])), "derived_answer_mismatch"),
    ("golden_doc_dropped", "bridge", drop_last_golden, "derivation_failed"),
    ("program_unknown_op", "inference", lambda r: set_program(r, {"op": "median", "args": []}), "derivation_failed"),
    ("program_unknown_relation", "bridge", lambda r: set_program(r, [[json.loads(r["meta"])["program"][0][0], "shoe_size"]]), "derivation_failed"),
    ("bad_meta_json", "bridge", set_("meta", "{not json"), "schema_violation"),
]

TASK_CASES = [
    ("blank_question", set_("question", " "), "question_blank"),
    ("empty_answer", set_("answer", ""), "answer_blank"),
    ("question_too_short", set_("question", "Who founded it?"), "question_too_short"),
    ("no_steps", lambda r: r["qcp"].__setitem__("hops", []), "qcp_empty"),
    ("step_without_query", hop(0, "query", " "), "qcp_step_no_query"),
    ("step_without_evidence", hop(1, "doc_ids", []), "qcp_step_no_evidence"),
    ("hop_count_off", lambda r: r.__setitem__("hop_count", r["hop_count"] + 1), "hop_count_mismatch"),
    ("answer_in_question", lambda r: r.__setitem__("question", f"{r['answer']}: " + r["question"]), "answer_in_question"),
    ("seed_doc_missing", lambda r: r["qcp"].__setitem__("seed_doc_id", "doc-nope"), "evidence_doc_missing"),
    ("evidence_doc_missing", hop(-1, "doc_ids", ["doc-nope"]), "evidence_doc_missing"),
    ("answer_not_reached", lambda r: r.update(answer="Quentin Zarvox", aliases=[]), "answer_not_in_last_step"),
    ("last_step_elsewhere", lambda r: r["qcp"]["hops"][-1].__setitem__("doc_ids", r["qcp"]["hops"][0]["doc_ids"]), "answer_not_in_last_step"),
    ("qcp_without_hops", lambda r: r.__setitem__("qcp", {"seed_doc_id": None}), "schema_violation"),
    ("negative_hop_count", set_("hop_count", -1), "schema_violation"),
]


def test_cases_have_documented_codes():
    for cases in (TRIPLE_CASES, TASK_CASES):
        assert len({c[0] for c in cases}) == len(cases) and all(c[-1] in REASONS for c in cases)


@pytest.mark.parametrize("name,qtype,mutate,expected", TRIPLE_CASES, ids=[c[0] for c in TRIPLE_CASES])
def test_corrupted_triple_is_rejected_with_reason(name, qtype, mutate, expected, corpus):
    triples, ctx = corpus
    row = copy.deepcopy(next(t for t in triples if t["qtype"] == qtype and len(t["golden_doc_ids"]) >= 2))
    assert first_fail(row, "triples", ctx) is None
    mutate(row)
    v = first_fail(row, "triples", ctx)
    assert v is not None and v.reason == expected, (name, v)


@pytest.mark.parametrize("name,mutate,expected", TASK_CASES, ids=[c[0] for c in TASK_CASES])
def test_corrupted_task_is_rejected_with_reason(name, mutate, expected, corpus):
    triples, ctx = corpus
    row = task_of(next(t for t in triples if t["qtype"] == "bridge" and len(t["golden_doc_ids"]) >= 3), ctx.documents)
    assert first_fail(row, "tasks", ctx) is None
    mutate(row)
    v = first_fail(row, "tasks", ctx)
    assert v is not None and v.reason == expected, (name, v)


def test_without_documents_and_without_program(corpus):
    triples, ctx = corpus
    t = dict(triples[0], meta=json.dumps({"format": "plain"}))  # an imported triple: no program
    assert [v.reason for v in check_record(t, "triples", ctx)][-1] == "no_program"
    blind = RuleContext()  # a user's file: documents unknown
    assert [v.reason for v in check_record(triples[0], "triples", blind)][-2:] == ["documents_unknown", "documents_unknown"]
    k = task_of(triples[0], ctx.documents)
    assert [v.reason for v in check_record(k, "tasks", blind)][-2:] == ["documents_unknown", "documents_unknown"]


triple_like = st.fixed_dictionaries(
    {"question": st.text(max_size=12), "answer": st.text(max_size=6)},
    optional={"golden_doc_ids": st.one_of(st.lists(st.sampled_from(["doc-nope", "x"]), max_size=3), st.integers()),
              "hop_count": st.one_of(st.integers(-1, 5), st.text(max_size=2)), "qtype": st.sampled_from(["comparison", "bridge"]),
              "supporting_facts": st.lists(st.dictionaries(st.sampled_from(["doc_id", "sentence"]), st.text(max_size=4))),
              "meta": st.one_of(st.none(), st.text(max_size=8), st.just('{"program": [["A", "founder"]]}')),
              "aliases": st.lists(st.one_of(st.text(max_size=4), st.integers()), max_size=2),
              "qcp": st.one_of(st.none(), st.fixed_dictionaries({"hops": st.lists(st.dictionaries(
                  st.sampled_from(["query", "doc_ids", "note"]), st.one_of(st.text(max_size=4), st.lists(st.text(max_size=3)))),
                  max_size=3)}, optional={"seed_doc_id": st.one_of(st.none(), st.text(max_size=3))}))})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(triple_like, max_size=5), st.sampled_from(["triples", "tasks"]))
def test_any_triple_or_task_gets_verdicts_and_no_crash(corpus, items, kind):
    v = Validator(ValidateConfig(kind=kind, layers="schema,rules", all_layers=True), kind, rule_ctx=corpus[1])
    rows, _ = v.process([(str(i), x) for i, x in enumerate(items)])
    assert {r["record_id"] for r in rows} == {str(i) for i in range(len(items))}
    assert all(r["reason"] in REASONS for r in rows)

"""The rules layer's `final_facts` step (validators/final_facts.py): the final think of a
compared, computed or multi-hop answer states a fact the answer follows from.

- The issue's example, a comparison whose final think names the pages and concludes, is
  rejected with `final_think_states_no_fact`; its version that states the values compared
  passes, in `check_trajectory` and in `forgeplay validate --input` (a user's file), where a
  record that says neither its question type nor its hop count passes unchecked
  (`question_kind_unknown`, rejected with --strict) and `--no-final-facts` leaves the step out.
- What a deciding fact is, on a table of final thinks.
- On 200 template trajectories of every question kind, synthesized and validated by the real
  flows with the defaults, every final think of a comparison states the values compared, of an
  arithmetic question the numbers used, of a bridge the pages in between, and every
  trajectory passes every rule, grounding and this one included.
"""

from __future__ import annotations

import json

import pytest

import flows.validate as fv
from generators.synth.sources import Sources
from storage import load_table
from validators.final_facts import check_final_facts
from validators.validator import ValidateConfig
from validators.trajectory_rules import RuleContext, check_trajectory
from validators.verdict import Reject

QUESTION = "Between Tethonia and Findavia, whose capital was founded more recently?"
PAGES = {  # as the world of `corpus world --seed 17 --entities 400` has them
    "Tethonia": "The Union of Tethonia, commonly called Tethonia, is a sovereign state. The country became independent "
                "in 1580. It has a population of 56,211,000. The country is governed from its capital, Dreath.",
    "Findavia": "The Republic of Findavia, commonly called Findavia, is a sovereign state. Findavia was established in "
                "1880. Findavia is governed from its capital, Verath. Cities in Findavia include Verath and Jorath.",
    "Dreath": "Dreath lies in Tethonia. It was founded in 1855. The city's population is 619,000.",
    "Verath": "Verath is a city located in Findavia. It was founded in 1321 and has a population of 377,400.",
}
ISSUE_THINK = ('The pages about "Tethonia", "Findavia", "Dreath" and "Verath" give everything needed. '
               "Conclude that the answer is Tethonia.")
STATED_THINK = ("Dreath, the capital of Tethonia, was founded in 1855 and Verath, the capital of Findavia, in 1321. "
                "1855 is later than 1321, so the answer is Tethonia.")
TOOL = {"tool_id": "t1", "name": "find_place", "description": "Find the pages about a place.",
        "parameters": json.dumps({"type": "object", "properties": {"query": {"type": "string", "minLength": 1}},
                                  "required": ["query"], "additionalProperties": False})}


def _turn(think: str, queries: list[str], k: int) -> list[dict]:
    calls = [{"id": f"c{k}{i}", "name": "find_place", "arguments": json.dumps({"query": q}), "injected_error": None}
             for i, q in enumerate(queries)]
    text = f"<think>{think}</think>\n" + "\n".join(
        "<tool_call>\n" + json.dumps({"name": "find_place", "arguments": {"query": q}}) + "\n</tool_call>" for q in queries)
    results = [{"role": "tool", "content": json.dumps({"results": [{"doc_id": f"doc-{q}", "title": q, "snippet": PAGES[q]}]}),
                "tool_call_id": c["id"], "name": "find_place", "tool_calls": None} for q, c in zip(queries, calls)]
    return [{"role": "assistant", "content": text, "tool_calls": calls, "tool_call_id": None, "name": None}, *results]


def example(final_think: str, rid: str = "issue", meta: dict | None = None) -> dict:
    """The issue's comparison as a trajectory row: two rounds of two lookups, then `final_think`."""
    msgs = [{"role": "system", "content": "You answer questions with the tools.", "tool_calls": None,
             "tool_call_id": None, "name": None},
            {"role": "user", "content": QUESTION, "tool_calls": None, "tool_call_id": None, "name": None},
            *_turn('To answer this I need to look up "Tethonia" and "Findavia", both places. '
                   "I will search for them first.", ["Tethonia", "Findavia"], 0),
            *_turn('The results have the pages about "Tethonia" and "Findavia". Now I need to look up "Dreath" and '
                   '"Verath", both places.', ["Dreath", "Verath"], 1),
            {"role": "assistant", "content": f"<think>{final_think}</think>\n<answer>Tethonia</answer>",
             "tool_calls": None, "tool_call_id": None, "name": None}]
    meta = {"qtype": "comparison", "hop_count": 4} if meta is None else meta
    return {"id": rid, "traj_id": rid, "triple_id": "tri-1", "question": QUESTION, "route": "mixed", "case": "clean",
            "messages": msgs, "tools": [TOOL], "correct_tools": ["find_place"], "answer": "Tethonia",
            "meta": json.dumps(meta)}


def test_the_issue_example_is_rejected_and_its_stated_facts_version_passes():
    vs = check_trajectory(example(ISSUE_THINK), RuleContext())
    assert [v.check for v in vs][-2:] == ["grounding", "final_facts"] and all(v.passed for v in vs[:-1])
    assert vs[-1].reason == "final_think_states_no_fact" and vs[-1].detail["kind"] == "compared"
    vs = check_trajectory(example(STATED_THINK), RuleContext())
    assert all(v.passed for v in vs) and vs[-1].check == "final_facts"
    assert vs[-1].detail == {"kind": "compared", "facts": ["1855", "1321"]}
    assert check_trajectory(example(ISSUE_THINK), RuleContext(final_facts=False))[-1].check == "grounding"


def _final(question: str, results: list[str], think: str, answer: str, meta: dict, lookups=()) -> dict:
    msgs = [{"role": "user", "content": question}, *({"role": "tool", "content": r} for r in results),
            {"role": "assistant", "content": f"<think>{think}</think><answer>{answer}</answer>"}]
    return check_final_facts(msgs, list(lookups), [answer], meta)


BRIDGE = ("Who founded the organisation that employed Halan Fowoum?",
          ["Halan Fowoum worked for Werledruv Holdings.", "Werledruv Holdings was founded by Sendia Jaikoulun."])
YEARS = ("What is the number of years between the founding of Wick and the establishment of the country that "
         "contains Wick?", ["Wick lies in Leivonia. Wick was founded in 1088.", "Leivonia became independent in 1884."])
SAME = ("Are Random House Tower and Ivy Hall both located in New York?",
        ["Random House Tower is a building in New York.", "Ivy Hall is a house in New York, founded in 1812."])
# (question and results, final think, answer, meta, lookups, kind or None for a reject)
DEFINITION = [
    (BRIDGE, "The pages about Halan Fowoum and Werledruv Holdings give everything needed.", "Sendia Jaikoulun",
     {"qtype": "bridge", "hop_count": 2}, ["Halan Fowoum", "Werledruv Holdings"], "multi-hop"),  # the bridge
    (BRIDGE, "Halan Fowoum's employer was founded by Sendia Jaikoulun.", "Sendia Jaikoulun",
     {"qtype": "bridge", "hop_count": 2}, ["Halan Fowoum"], None),  # the question's entity and the answer only
    (YEARS, "Leivonia became independent in 1884 and Wick was founded in 1088; 1884 - 1088 = 796.", "796",
     {"qtype": "compositional", "hop_count": 2}, ["Wick", "Leivonia"], "computed"),
    (YEARS, "The pages about Wick and Leivonia give everything needed.", "796",
     {"qtype": "compositional", "hop_count": 2}, ["Wick", "Leivonia"], None),  # a computed answer needs a number
    (YEARS, "I read two pages about Wick, so it is 796.", "796", {}, ["Wick"], None),  # no meta: 796 is on no page
    (SAME, "Random House Tower is in New York and Ivy Hall is in New York.", "yes", {},
     ["Random House Tower", "Ivy Hall"], "compared"),  # a value the question names
    (SAME, "The pages about Random House Tower and Ivy Hall give everything needed.", "yes", {},
     ["Random House Tower", "Ivy Hall"], None),  # the pages compared are no fact
    (SAME, "Random House Tower and Ivy Hall, looked up in New York, settle it.", "yes", {},
     ["Random House Tower in New York", "Ivy Hall"], None),  # New York was looked up
]


@pytest.mark.parametrize("case,think,answer,meta,lookups,kind", DEFINITION, ids=[str(i) for i in range(len(DEFINITION))])
def test_what_a_deciding_fact_is(case, think, answer, meta, lookups, kind):
    question, results = case
    if kind is None:
        with pytest.raises(Reject) as e:
            _final(question, results, think, answer, meta, lookups)
        assert e.value.reason == "final_think_states_no_fact"
    else:
        assert _final(question, results, think, answer, meta, lookups)["kind"] == kind


def test_which_answers_it_applies_to():
    question, results = BRIDGE
    said = "So the answer is Sendia Jaikoulun."
    assert _final(question, results, said, "Sendia Jaikoulun", {"qtype": "bridge", "hop_count": 1}) == {"kind": "other"}
    assert _final(question, results, said, "Sendia Jaikoulun", {}) == {"reason": "question_kind_unknown"}
    assert _final(question, results, said, "Sendia Jaikoulun", {"hop_count": "x", "qtype": None}) == \
        {"reason": "question_kind_unknown"}


def test_a_users_file_is_checked_from_its_records(tmp_path):
    """`forgeplay validate --input FILE`: the example is rejected, its stated version accepted, a
    record without qtype and hop_count passes unchecked and is counted as skipped (--strict
    rejects it), and --no-final-facts accepts the example."""
    path = tmp_path / "theirs.jsonl"
    rows = [example(ISSUE_THINK, "issue"), example(STATED_THINK, "stated"), example(ISSUE_THINK, "no-meta", meta={})]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    root = tmp_path / "data"

    def run(out: str, **kw) -> tuple[dict, dict]:
        s = fv.run(ValidateConfig(input=str(path), out=out, layers="schema,rules", **kw), data_root=root, progress=False)
        verdicts = {v["record_id"]: (v["passed"], v["reason"]) for v in load_table(out, "verdicts", root).to_pylist()
                    if v["check"] == "final_facts"}
        return s, verdicts

    s, verdicts = run("plain")
    assert verdicts == {"issue": (False, "final_think_states_no_fact"), "stated": (True, "ok"),
                        "no-meta": (True, "question_kind_unknown")}
    assert set(load_table("plain", "trajectories", root).column("id").to_pylist()) == {"stated", "no-meta"}
    assert {"layer": "rules", "check": "final_facts", "reason": "question_kind_unknown", "records": 1} in s["skipped_checks"]
    _, verdicts = run("strict", strict=True)
    assert verdicts["no-meta"] == (False, "question_kind_unknown")
    s, verdicts = run("off", final_facts=False)
    assert verdicts == {} and s["rows_out"] == 3


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    """200 template trajectories of a 500-entity world, synthesized and validated by the flows
    with their defaults: (root, trajectory rows, verdict rows, triples by id, evidence by triple id)."""
    from flows.synthesize import run as synthesize
    from generators.corpus.build import WorldConfig, write
    from generators.llm.registry import BackendConfig
    from generators.synth.evidence import evidence_for
    from generators.synth.synthesize import SynthConfig

    root = tmp_path_factory.mktemp("facts") / "data"
    write(WorldConfig(seed=13, entities=500), root, "w")
    summary = synthesize(SynthConfig(dataset="w", n=200, texts="template"), BackendConfig(), root, progress=False)
    fv.run(ValidateConfig(dataset="w", layers="schema,rules"), data_root=root, progress=False)
    rows = load_table("w", "trajectories", root, run_id=summary["run_id"]).to_pylist()
    verdicts = load_table("w", "verdicts", root).to_pylist()
    triples = {t["triple_id"]: t for t in load_table("w", "triples", root).to_pylist()}
    docs = {d["doc_id"]: (d["title"], d["text"]) for d in load_table("w", "documents", root).to_pylist()}
    evidence = {t: evidence_for(tr, {d: docs[d] for d in tr["golden_doc_ids"]}) for t, tr in triples.items()}
    return root, rows, verdicts, triples, evidence


def test_every_final_think_of_the_default_data_states_its_deciding_facts(synthesized):
    _, rows, verdicts, _, evidence = synthesized
    assert len(rows) == 200
    kinds, checked = set(), 0
    for r in rows:
        meta, ev = json.loads(r["meta"]), evidence[r["triple_id"]]
        think = r["messages"][-1]["content"].split("</think>")[0].removeprefix("<think>")
        kinds.add(f"{meta['qtype']}/{meta['hop_count']}")
        if ev.op in ("argmin", "argmax"):  # the values compared, as the evidence's listing gives them
            values = [part.split(": ", 1)[1] for part in ev.steps[0].rstrip(".").split("; ")]
        elif ev.op == "absdiff":  # the numbers used
            values = ev.expression.split(" - ")
        elif meta["qtype"] == "bridge":  # the pages in between: every lookup after the first
            values = [q.removeprefix("The ") for rnd in meta["queries"][1:] for q in rnd]
        else:
            values = []
        assert all(v in think for v in values), (r["question"], think, values)
        checked += bool(values)
        assert Sources([m["content"] for m in r["messages"][:-1]]).ungrounded(think) == [], think
    assert kinds >= {f"{q}/{h}" for q in ("bridge", "comparison", "compositional") for h in (2, 3, 4)} - \
        {"comparison/3"}, kinds
    assert checked >= 100, checked
    by_record: dict[str, list[dict]] = {}
    for v in verdicts:
        by_record.setdefault(v["record_id"], []).append(v)
    assert set(by_record) == {r["id"] for r in rows}
    for r in rows:  # every rule passed, grounding and final facts among them, and really checked
        vs = {v["check"]: v for v in by_record[r["id"]]}
        assert all(v["passed"] for v in vs.values()), [v for v in vs.values() if not v["passed"]]
        assert vs["replay"]["reason"] == "ok" and vs["grounding"]["reason"] == "ok"
        assert vs["final_facts"]["reason"] == "ok" and json.loads(vs["final_facts"]["detail"])["facts"]

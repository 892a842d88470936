"""Arbitrary input never crashes the runner (hypothesis), and the dedup layer finds exact,
near and held-out duplicates."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from validators.dedup import Deduper
from validators.validator import ValidateConfig, Validator, raw_id

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=5),
                           max_leaves=20)
message = st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool", "x"]),
                                 "content": st.lists(st.sampled_from(list("ab <>/{}\":") + [
                                     "<think>", "</think>", "<tool_call>", "</tool_call>", "<answer>", "</answer>",
                                     '{"name": "f", "arguments": {}}']), max_size=12).map("".join)})
trajectory_like = st.fixed_dictionaries(
    {"traj_id": st.text(min_size=1, max_size=5), "triple_id": st.text(max_size=5),
     "route": st.sampled_from(["single", "parallel", "sequential", "mixed", "?"]), "case": st.text(max_size=5),
     "messages": st.lists(message, max_size=6), "tools": st.just([]), "answer": st.text(max_size=10)},
    optional={"meta": st.one_of(st.none(), st.text(max_size=10)), "correct_tools": st.lists(st.text(max_size=5))})
records = st.lists(st.one_of(json_values, trajectory_like, st.text()), max_size=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records)
def test_any_input_gets_verdicts_and_no_crash(items):
    v = Validator(ValidateConfig(layers="schema,rules,dedup", all_layers=True), "trajectories")
    recs = [(f"{i}-{raw_id(x)}", x) for i, x in enumerate(items)]
    rows, accepted = v.process(recs)
    assert {r["record_id"] for r in rows} == {rid for rid, _ in recs}
    assert all(r["passed"] or r["reason"] for r in rows)
    assert all(isinstance(r["detail"], (str, type(None))) for r in rows)
    json.dumps(rows)
    assert len(accepted) <= len(items)


def test_dedup_exact_near_and_heldout():
    d = Deduper(threshold=0.7)
    d.add_heldout(["Which river flows through the city of Maara in the north? || Orvane"])
    base = "Who founded the company that published the novel Crowns of Gebroul in 1901? || Thoim Posnu"
    assert d.check("a", base).passed
    assert d.check("b", base.upper() + "!").reason == "exact_duplicate"
    near = "Who founded the company that published the novel Crowns of Gebroul in 1901? || Thoim Posnus"
    v = d.check("c", near)
    assert v.reason == "near_duplicate" and v.score >= 0.7 and json.dumps(v.detail)
    assert d.check("d", "Which river flows through the city of Maara in the north? || Orvane").reason == "heldout_overlap"
    assert d.check("e", "How many people live in Femar according to the census? || 1505300").passed
    assert d.check("a", base).passed  # a record is not its own duplicate


def test_trajectories_of_one_triple_are_not_duplicates_unless_their_conversations_are():
    """Several trajectories of one triple share its question: dedup keeps each distinct
    conversation, rejects a copy of one, and still rejects the question under another triple."""
    from validators.dedup import _check

    d = Deduper()
    question = ("In which city of the old kingdom was the mathematician and writer Ada Lovelace, who worked with "
                "Charles Babbage on the analytical engine and wrote its first program, born?")
    row = {"question": question, "answer": "London", "triple_id": "t1",
           "messages": [{"role": "user", "content": question}]}
    other = dict(row, messages=row["messages"] + [{"role": "assistant", "content": "<think>x</think>"}])
    assert _check(d, "a", row, "trajectories").passed
    assert _check(d, "b", other, "trajectories").passed  # a variant of the same triple
    copy = _check(d, "c", dict(other), "trajectories")
    assert not copy.passed and copy.code == "exact_duplicate" and "b" in copy.detail_text()
    elsewhere = _check(d, "d", dict(other, triple_id="t2"), "trajectories")
    assert not elsewhere.passed and elsewhere.code == "exact_duplicate"
    asked = question.replace("born?", "born and raised?")
    near = _check(d, "e", dict(row, question=asked, triple_id="t3", messages=[{"role": "user", "content": asked}]),
                  "trajectories")
    assert not near.passed and near.code == "near_duplicate"
    assert _check(d, "b", other, "trajectories").passed  # a record checked again (a resumed run) is no copy of itself

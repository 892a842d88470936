"""Arbitrary input never crashes the runner (hypothesis), and the dedup layer finds exact,
near and held-out duplicates."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from validators.dedup import Deduper
from validators.runner import ValidateConfig, Validator, raw_id

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

"""ToolForge-style synthesis on a real world corpus, real tool bank and real BM25 simulator.
The LLM is the expensive boundary: a scripted backend stands in for it here (the flow test
and the slow test use real models)."""

import json
import random
from collections import Counter

import jsonschema
import pytest

from generators.answers import match
from generators.corpus.build import WorldConfig, write
from generators.llm.scripted import ScriptedBackend
from generators.llm.toolcalls import parse_tool_calls
from generators.synth import plan as planning
from generators.synth.cases import INVENTED, invented
from generators.synth.synthesize import Session, SynthConfig, load_inputs
from generators.synth.tally import mix_report
from generators.tools.bank import build_bank
from storage.schema import load
from storage.shards import stamp


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write(WorldConfig(seed=11, entities=400), root, "w")  # through the real shard writer
    return load_inputs(root, "w")


@pytest.fixture(scope="module")
def tools():
    return build_bank(seed=3, variants_per_tool=2)


@pytest.fixture(scope="module")
def synthesized(inputs, tools):
    every_case = {**planning.DEFAULT_CASE_MIX, "repeat": 0.1, "unknown_tool": 0.1}  # the default mix and the opt-in cases
    cfg = SynthConfig(dataset="w", n=120, seed=5, case_mix=",".join(f"{k}={v}" for k, v in every_case.items()))
    s = Session(inputs, cfg, tools)
    plans = s.plans()
    rows, stats = s.trajectories(plans, ScriptedBackend(), "run-x")
    return s, plans, rows, stats


def test_every_trajectory_fits_the_schema(synthesized):
    _, _, rows, _ = synthesized
    schema = load("trajectories")
    schema.validate_rows(stamp(rows, schema, "run-x"))
    assert len(rows) == 120


def test_tool_calls_fit_offered_schemas_unless_flagged_and_replay_exactly(synthesized):
    s, _, rows, _ = synthesized
    flagged = made_up = 0
    for r in rows:
        offered = {t["name"]: json.loads(t["parameters"]) for t in r["tools"]}
        meta = json.loads(r["meta"])
        msgs = r["messages"]
        tool_msgs = {m["tool_call_id"]: m for m in msgs if m["role"] == "tool"}
        for m in msgs:
            if m["role"] != "assistant" or not m["tool_calls"]:
                continue
            parsed = parse_tool_calls(m["content"])
            assert not parsed.errors and [c["name"] for c in parsed.calls] == [c["name"] for c in m["tool_calls"]]
            for c in m["tool_calls"]:
                args = json.loads(c["arguments"])
                if c["injected_error"] == "unknown_tool":  # a made-up tool: not offered, the simulator knows none
                    assert c["name"] not in offered and json.loads(tool_msgs[c["id"]]["content"])["error"] == "unknown_tool"
                    made_up += 1
                    continue
                assert c["name"] in offered
                valid = jsonschema.Draft202012Validator(offered[c["name"]]).is_valid(args)
                if c["injected_error"] and c["injected_error"].startswith("wrong_args"):
                    assert not valid
                    flagged += 1
                else:
                    assert valid, (r["case"], c)
                k = meta["calls"][c["id"]]
                replay = s.sim.call(c["name"], args, golden_doc_ids=k["golden_doc_ids"], mode=k["mode"],
                                    supporting=k["supporting"], answers=k["answers"])
                assert replay == tool_msgs[c["id"]]["content"]
    assert flagged > 0 and made_up > 0


def test_message_structure_and_answers(synthesized):
    s, _, rows, _ = synthesized
    for r in rows:
        roles = [m["role"] for m in r["messages"]]
        assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
        final = r["messages"][-1]["content"]
        assert final.startswith("<think>") and final.count("<answer>") == 1
        triple = s.triples[r["triple_id"]]
        assert match(r["answer"], triple["answer"], triple["aliases"]).em
        assert f"<answer>{r['answer']}</answer>" in final
        for m in r["messages"]:
            if m["role"] == "assistant":
                assert m["content"].startswith("<think>") and "</think>" in m["content"]
        # the <tools> block is valid JSON per line
        block = r["messages"][0]["content"].split("<tools>\n")[1].split("\n</tools>")[0]
        names = [json.loads(line)["function"]["name"] for line in block.splitlines()]
        assert names == [t["name"] for t in r["tools"]]
        needed = json.loads(r["meta"])["needed_tools"]
        assert set(r["correct_tools"]) <= set(needed) <= set(names)
        assert 3 <= len(names) - len(needed) <= 8  # distractors (the wrong tool of a case is one of them)


def test_routes_follow_structure(synthesized):
    s, plans, _, _ = synthesized
    for p in plans:
        t = s.triples[p.triple_id]
        program = json.loads(t["meta"])["program"]
        if t["qtype"] == "bridge":
            assert p.route == "sequential" and len(p.rounds) == t["hop_count"]
        if isinstance(program, dict) and program.get("op") in ("argmin", "argmax") and t["hop_count"] == 2:
            assert p.route == "parallel"
        if isinstance(program, dict) and program.get("op") == "eq" and t["hop_count"] == 4:
            assert p.route == "mixed"
        assert sorted(h.doc_id for r in p.lookups for h in r) == sorted(t["golden_doc_ids"])
        # with the calculator (off here) a computed answer ends with one call of it
        computes = s.computes and isinstance(program, dict) and program.get("op") == "absdiff"
        assert ([h.compute for h in p.rounds[-1]] == [True]) if computes else (p.computed is None)


def test_cases_behave_as_named(synthesized):
    _, _, rows, _ = synthesized
    by_case = Counter(r["case"] for r in rows)
    assert set(by_case) == set(planning.CASES)
    for r in rows:
        injected = [c["injected_error"] for m in r["messages"] if m["tool_calls"] for c in m["tool_calls"]
                    if c["injected_error"]]
        calls = [c for m in r["messages"] if m["tool_calls"] for c in m["tool_calls"]]
        hops = sum(len(x) for x in json.loads(r["meta"])["plan"])
        if r["case"] == "clean":
            assert not injected and len(calls) == hops
        elif r["case"] == "wrong_args":
            assert [i.split(":")[0] for i in injected] == ["wrong_args"]
            bad = next(c for c in calls if c["injected_error"])
            later = [c for c in calls if c["name"] == bad["name"] and not c["injected_error"]]
            assert later, "the wrong-arguments call is fixed with the same tool"
        elif r["case"] == "wrong_tool":
            assert injected == ["wrong_tool"] and len(calls) == hops + 1
        elif r["case"] == "escalation":
            assert injected[0] == "wrong_tool" and injected[1].startswith("wrong_args") and len(calls) == hops + 3
            modes = [m for m in json.loads(r["meta"])["calls"].values()]
            assert any(m["mode"] == "insufficient" for m in modes)
        elif r["case"] == "early_stop":
            assert not injected and len(calls) == hops - 1
        elif r["case"] == "repeat":  # one lookup made twice, the second flagged; the turn after it says so
            assert injected == ["repeated_call"] and len(calls) == hops + 1
            at = next(i for i, m in enumerate(r["messages"]) if m["tool_calls"] and m["tool_calls"][0]["injected_error"])
            again = r["messages"][at]["tool_calls"][0]
            assert sum((c["name"], c["arguments"]) == (again["name"], again["arguments"]) for c in calls) == 2
        elif r["case"] == "unknown_tool":  # one call of a tool not offered, then the same lookup with an offered one
            assert injected == ["unknown_tool"] and len(calls) == hops + 1
            made_up = next(c for c in calls if c["injected_error"])
            assert made_up["name"] not in {t["name"] for t in r["tools"]}


def test_mix_is_configurable_and_reported(inputs, tools):
    cfg = SynthConfig(dataset="w", n=30, seed=1, case_mix="wrong_tool=1", route_mix="parallel=1")
    s = Session(inputs, cfg, tools)
    plans = s.plans()
    rows, _ = s.trajectories(plans, ScriptedBackend(), "r")
    rep = mix_report(rows)
    assert rep["case"] == {"wrong_tool": 30}
    assert rep["route"] == {"parallel": 30}
    with pytest.raises(ValueError, match="unknown names"):
        planning.parse_mix("clean=1,bogus=2", planning.CASES)


def test_text_sources_are_recorded_and_bad_llm_text_falls_back(synthesized):
    _, _, rows, stats = synthesized
    assert stats["sources"]["llm"] > 0 and stats["fallbacks"]["template:markup"] > 0
    assert stats["fallbacks"]["template:off_topic"] > 0 and stats["fallbacks"]["template:ungrounded"] > 0
    for r in rows:
        for m in r["messages"]:
            if m["role"] == "assistant":
                think = m["content"].split("</think>")[0]
                assert "<tool_call>" not in think


def test_deterministic_per_seed(inputs, tools):
    def run():
        s = Session(inputs, SynthConfig(dataset="w", n=20, seed=9), tools)
        return s.trajectories(s.plans(), ScriptedBackend(), "r")[0]

    assert run() == run()


def test_reasoning_must_mention_what_the_step_is_about():
    from generators.synth.skeleton import Slot
    from generators.synth.think import clean_think

    nxt = Slot("next", {"found": ["Velmora"], "queries": ["Ada Quell"]})
    assert clean_think("Now I should look up Ada Quell to continue.", nxt) == (
        "Now I should look up Ada Quell to continue.", "llm")
    text, source = clean_think("The capital of France is Paris, a lovely city.", nxt)
    assert source == "template:off_topic" and "Ada Quell" in text
    fix = Slot("fix_args", {"tool": "search_person", "error": "query: required", "query": "Ada Quell"})
    assert clean_think("My call to search_person broke its schema; I will retry.", fix)[1] == "llm"
    final = Slot("final", {"found": ["Ada Quell"], "answer": "1887", "skipped": None, "question": "q"})
    assert clean_think("She was born in 1887 according to her page.", final)[1] == "llm"
    assert clean_think("She was born long ago in some year.", final)[1] == "template:off_topic"


def test_a_made_up_tool_name_is_never_one_the_bank_has():
    """The unknown_tool case names a tool after the kind of page (search_film for a work); a name
    taken by the bank or the offer is skipped, and when every usual one is taken a numbered one is made."""
    rng = random.Random(0)
    usual = {f"search_{w}" for w in INVENTED["work"]} | {"search_work_pages"}
    assert {invented(rng, "work", set()) for _ in range(50)} == usual
    assert invented(rng, "work", usual - {"search_book"}) == "search_book"
    assert invented(rng, "work", usual | {"search_work_0"}) == "search_work_1"

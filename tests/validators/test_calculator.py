"""The calculator tool: plain arithmetic only, answered by every simulator, called by a
computed answer's trajectory before its final think, and held to the rules like any tool
(replayed byte for byte; a final think whose arithmetic the result does not give is
rejected)."""

import json
import re
from dataclasses import replace

import pytest

from generators.llm.base import Completion
from generators.synth.synthesize import Session, SynthConfig, load_inputs
from generators.synth.think import YEARS
from generators.tools.bank import build_bank
from generators.tools.compute import NAME, answer, evaluate
from generators.tools.simulator import Simulator
from validators.trajectory_rules import check_trajectory


@pytest.mark.parametrize("expression, value", [("1863 - 1783", 80), ("1783 - 1863", -80), ("1,975,600 - 100", 1975500),
                                               ("(3 + 4) * 2", 14), ("7 / 2", 3.5), ("-5 + 2", -3), ("12", 12)])
def test_calculator_evaluates_arithmetic(expression, value):
    assert evaluate(expression) == value
    assert json.loads(answer(expression)) == {"expression": expression, "result": value}


@pytest.mark.parametrize("expression, why", [("2 ** 1000", "only numbers"), ("__import__('os')", "only numbers"),
                                             ("x + 1", "only numbers"), ("1 / 0", "division by zero"),
                                             ("9" * 40 + " * 9", "too large"), ("1e308 * 10", "too large"),
                                             ("1863 -", "not an arithmetic expression")])
def test_calculator_refuses_anything_else_with_a_reason(expression, why):
    out = json.loads(answer(expression))
    assert out["error"] == "invalid_expression" and why in out["detail"], out


def test_every_simulator_answers_the_calculator_and_checks_its_arguments(world):
    _, _, docs, _ = world
    sim = Simulator(docs, seed=1)  # no bank given: the calculator is known anyway
    assert sim.call(NAME, {"expression": "1863 - 1783"}) == answer("1863 - 1783")
    assert json.loads(sim.call(NAME, {"query": "1863 - 1783"}))["error"] == "invalid_arguments"
    assert json.loads(sim.call(NAME, {"expression": ""}))["error"] == "invalid_arguments"


def _calls(row: dict) -> list[tuple[dict, str]]:
    """(call, tool message) pairs of a trajectory, in order."""
    msgs = row["messages"]
    return [(c, msgs[i + 1 + j]["content"]) for i, m in enumerate(msgs) if m["tool_calls"]
            for j, c in enumerate(m["tool_calls"])]


def _computes(row: dict) -> bool:
    """Whether a trajectory calls the calculator."""
    return any(c["name"] == NAME for c, _ in _calls(row))


@pytest.fixture(scope="module")
def inputs(world):
    return load_inputs(world[0], "w")


@pytest.fixture(scope="module")
def calculator_bank():
    return build_bank(seed=3, variants_per_tool=0, calculator=True)


def test_computed_answers_call_the_calculator_last_and_pass_every_rule(world, rule_ctx):
    _, rows, _, _ = world
    computed = [r for r in rows if _computes(r)]
    assert len(computed) >= 3, "the fixture's trajectories include computed answers"
    for row in computed:
        call, result = _calls(row)[-1]
        assert call["name"] == NAME  # after every lookup it needs
        assert json.loads(result)["result"] == int(row["answer"])
        final = row["messages"][-1]["content"]
        assert re.search(re.escape(f"{json.loads(call['arguments'])['expression']} = {row['answer']}") + "[.,]", final)
        assert all(v.passed for v in check_trajectory(row, rule_ctx)), check_trajectory(row, rule_ctx)[-1]
    row = computed[0]
    tampered = json.loads(json.dumps(row))
    i = max(i for i, m in enumerate(tampered["messages"]) if m["name"] == NAME)
    tampered["messages"][i]["content"] = answer("1 + 1")
    assert check_trajectory(tampered, rule_ctx)[-1].reason == "replay_mismatch"
    wrong = json.loads(json.dumps(row))
    value = int(row["answer"]) + 10
    wrong["messages"][-1]["content"] = re.sub(r"= \d+([.,])", rf"= {value}\1", wrong["messages"][-1]["content"])
    assert check_trajectory(wrong, rule_ctx)[-1].reason == "think_unsupported_number"


def test_no_calculator_means_no_computed_round_and_none_offered(inputs):
    for calculator in (True, False):
        bank = build_bank(seed=3, variants_per_tool=0, calculator=calculator)
        s = Session(inputs, SynthConfig(dataset="w", n=40, calculator=calculator), bank)
        plans = s.plans()
        assert any(p.computed for p in plans) == calculator
        assert (NAME in {t["name"] for t in bank}) == calculator
        for p in plans:  # only a computed answer calls it, once, after the lookups it needs
            program = json.loads(s.triples[p.triple_id]["meta"])["program"]
            computes = calculator and isinstance(program, dict) and program.get("op") == "absdiff"
            assert [h.compute for r in p.rounds for h in r] == [False] * len(p.hops[:-1]) + [True] if computes \
                else not any(h.compute for h in p.hops)


def test_a_computed_answers_thinks_say_what_it_asks_and_that_the_calculator_comes_last(inputs, calculator_bank):
    """Every think of a trajectory that ends with the calculator starts by saying the question
    asks for years between dates, its first think and the think before its last lookup say the
    calculator comes last; no other trajectory says either."""
    s = Session(inputs, SynthConfig(dataset="w", n=40, calculator=True, texts="template"), calculator_bank)
    plans = {p.triple_id: p for p in s.plans()}
    rows, _ = s.trajectories(list(plans.values()), None, "run")  # every text a template
    for r in rows:
        thinks = [m["content"].split("</think>")[0] for m in r["messages"] if m["role"] == "assistant"]
        computes = _computes(r)
        assert all(t.startswith(f"<think>{YEARS} ") for t in thinks) if computes \
            else not any(YEARS in t for t in thinks)
        assert ("compute the answer with the calculator" in thinks[0]) == computes
        then = sum("then compute the answer with the calculator" in t for t in thinks[1:])
        p = plans[r["triple_id"]]  # said before the last lookup, unless the first turn makes it
        assert then == (computes and len(p.lookups) > (2 if p.case == "early_stop" else 1))
    assert any(_computes(r) for r in rows)


@pytest.mark.parametrize("reasoning", ["brief", "plan"])
def test_lead_later_leaves_the_first_think_of_every_question_opening_alike(inputs, calculator_bank, reasoning):
    """`--lead later`: a computed answer's first think no longer opens with the lead (every
    question's first think opens alike), its later thinks still do, and its first think still
    says the calculator comes last."""
    cfg = SynthConfig(dataset="w", n=40, calculator=True, texts="template", reasoning=reasoning)
    every, later = (Session(inputs, replace(cfg, lead=lead), calculator_bank) for lead in ("every", "later"))
    rows, _ = later.trajectories(later.plans(), None, "run")
    assert later.plans() == every.plans()  # the same questions, only the texts differ
    assert any(_computes(r) for r in rows)
    for r in rows:
        thinks = [m["content"].split("</think>")[0] for m in r["messages"] if m["role"] == "assistant"]
        assert YEARS not in thinks[0]
        assert all(t.startswith(f"<think>{YEARS} ") for t in thinks[1:]) if _computes(r) \
            else not any(YEARS in t for t in thinks)
        assert ("calculator" in thinks[0]) == _computes(r)  # "then the calculator" in a plan
    with pytest.raises(ValueError, match="--lead must be one of every, later, not 'first'"):
        SynthConfig(lead="first")


class Situation:
    """The expensive boundary, the model: it writes back each prompt's situation, a text that
    mentions what its step is about and states nothing the step's facts do not give."""

    name, model = "scripted", "situation"

    def generate(self, requests, progress: bool = False):
        said = [r.messages[-1]["content"].split("Situation: ")[-1].split("\n")[0] for r in requests]
        return [[Completion(text=s)] for s in said]


def test_model_written_thinks_of_a_computed_answer_get_the_same_lead(inputs, calculator_bank):
    """The lead is the program's, like the calls: a kept model text gets it too."""
    s = Session(inputs, SynthConfig(dataset="w", n=40, calculator=True), calculator_bank)
    rows, stats = s.trajectories(s.plans(), Situation(), "run")
    kept = 0
    for r in rows:
        computes = _computes(r)
        said = [m["content"] for m in r["messages"] if m["role"] == "assistant"]
        sources = (r["meta"] if isinstance(r["meta"], dict) else json.loads(r["meta"]))["text_sources"]
        for text, source in zip(said, sources):
            assert text.startswith(f"<think>{YEARS} ") == computes
            kept += computes and source == "llm"
    assert kept > 0, stats["fallbacks"]

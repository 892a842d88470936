"""Schema + rule layers: every clean synthesized trajectory passes; 66 corrupted copies are
each rejected with the expected reason code (real parser, real simulator replay), among
them reasoning that invents a number, a date or a name, and final reasoning of a compared,
computed or multi-hop answer that states no fact it follows from."""

import copy
import json
from dataclasses import replace

import pytest

from validators.reasons import REASONS
from validators.trajectory_rules import check_trajectory
from validators.schema_layer import check_schema


def first_fail(row, ctx):
    v = check_schema(row, "trajectories")
    if not v.passed:
        return v
    vs = check_trajectory(row, ctx)
    return next((x for x in vs if not x.passed), None)


def test_every_clean_trajectory_passes_schema_and_rules(world, rule_ctx):
    _, rows, _, _ = world
    assert len(rows) == 40 and {r["case"] for r in rows} >= {"clean", "wrong_args", "wrong_tool"}
    for r in rows:
        assert first_fail(r, rule_ctx) is None, (r["route"], r["case"], first_fail(r, rule_ctx))
        vs = check_trajectory(r, rule_ctx)
        assert [v.check for v in vs] == ["structure", "format", "tools", "route", "replay", "answer", "grounding",
                                         "final_facts"]
        assert vs[4].reason == "ok" and vs[4].detail["calls"] >= 1  # really replayed
        assert vs[5].detail["em"] is True
        assert vs[6].detail["thinks"] == sum(m["role"] == "assistant" for m in r["messages"])  # every think read
        assert vs[7].reason == "ok" and (vs[7].detail["kind"] == "other" or vs[7].detail["facts"])


@pytest.mark.parametrize("first_search", ["domain", "general"])
def test_plan_reasoning_passes_every_rule_layer(world, rule_ctx, first_search):
    """`--reasoning plan` texts (the question's own phrases for every lookup) are grounded too, also
    with the first round's lookups through the general search (`--first-search general`), in every
    case."""
    from generators.synth.synthesize import Session, SynthConfig, load_inputs

    root, _, _, bank = world
    s = Session(load_inputs(root, "w"), SynthConfig(dataset="w", n=40, calculator=True, reasoning="plan",
                                                    texts="template", first_search=first_search), bank)
    rows, _ = s.trajectories(s.plans(), None, "run")
    planned = [r for r in rows if "Next is" in json.dumps(r["messages"])]
    assert len(planned) >= 10, len(planned)
    assert {r["case"] for r in rows} >= {"clean", "wrong_args", "wrong_tool", "escalation", "early_stop"}
    for r in rows:
        assert first_fail(r, rule_ctx) is None, (r["route"], r["case"], first_fail(r, rule_ctx))


# -- helpers that corrupt a copy --------------------------------------------------------------
def assistant_idx(row, k=0):
    return [i for i, m in enumerate(row["messages"]) if m["role"] == "assistant"][k]


def tool_idx(row, k=0):
    return [i for i, m in enumerate(row["messages"]) if m["role"] == "tool"][k]


def rewrite(msg, calls):
    think = msg["content"].split("</think>")[0] + "</think>"
    blocks = "\n".join("<tool_call>\n" + json.dumps({"name": c["name"], "arguments": json.loads(c["arguments"])})
                       + "\n</tool_call>" for c in calls)
    msg["content"], msg["tool_calls"] = think + "\n" + blocks, calls


def set_args(row, fn, k=0):
    m = row["messages"][assistant_idx(row, k)]
    calls = copy.deepcopy(m["tool_calls"])
    a = json.loads(calls[0]["arguments"])
    fn(a)
    calls[0]["arguments"] = json.dumps(a)
    rewrite(m, calls)


def set_name(row, name, k=0):
    m = row["messages"][assistant_idx(row, k)]
    calls = copy.deepcopy(m["tool_calls"])
    calls[0]["name"] = name
    rewrite(m, calls)
    row["messages"][tool_idx(row, k)]["name"] = name


def body(row, text, k=0):
    m = row["messages"][assistant_idx(row, k)]
    m["content"] = m["content"].split("</think>")[0] + "</think>\n" + text


def final(row, text):
    row["messages"][-1]["content"] = text


def swap(row, i, j):
    row["messages"][i], row["messages"][j] = row["messages"][j], row["messages"][i]


def pick(rows, pred):
    return next(r for r in rows if pred(r))


def flagged(r, prefix):
    return [c for m in r["messages"] if m["tool_calls"] for c in m["tool_calls"] if (c["injected_error"] or "").startswith(prefix)]


def not_needed_tool(r):
    return next(t["name"] for t in r["tools"] if t["name"] not in r["correct_tools"])


def set_field(obj, key, value):
    obj[key] = value


def set_think(row, text, k=0):
    m = row["messages"][assistant_idx(row, k)]
    m["content"] = "<think>" + text + "</think>" + m["content"].split("</think>", 1)[1]


def tool_numbers(row):
    """Numbers (years, counts) that the tool results state, in order."""
    import re
    return [int(x) for m in row["messages"] if m["role"] == "tool"
            for x in re.findall(r"(?<![\w,.])\d{3,4}(?![\d,])", json.loads(m["content"]).__str__())]


def later_title(row):
    """A page title shown only by the last tool result, not before it."""
    msgs = row["messages"]
    last = max(i for i, m in enumerate(msgs) if m["role"] == "tool")
    before = " ".join(m["content"] for m in msgs[:last])
    return next(x["title"] for x in json.loads(msgs[last]["content"])["results"] if x["title"] not in before)


def flagged_turn(row, flag="repeated_call"):
    """The index among assistant turns of the turn whose first call is flagged `flag`."""
    turns = [m for m in row["messages"] if m["role"] == "assistant"]
    return next(k for k, m in enumerate(turns) if m["tool_calls"] and m["tool_calls"][0]["injected_error"] == flag)


def repeat_again(row):
    """The turn after the repeated call makes the same call once more (unflagged), with the same result."""
    k = flagged_turn(row)
    a = assistant_idx(row, k)
    t = a + 1  # its one tool message
    again, result = copy.deepcopy(row["messages"][a]), copy.deepcopy(row["messages"][t])
    again["tool_calls"][0]["injected_error"] = None
    row["messages"][t + 1:t + 1] = [again, result]


def looked_up(row):
    """The names the row's calls looked up (their queries), in order."""
    return list(dict.fromkeys(json.loads(c["arguments"])["query"] for m in row["messages"] if m["tool_calls"]
                              for c in m["tool_calls"] if "query" in json.loads(c["arguments"])))


def pages_only(row):
    """The final think names the pages looked up and concludes (what `--reasoning brief` writes for
    a comparison), with the same answer."""
    pages = ", ".join(f'"{q}"' for q in looked_up(row))
    final(row, f"<think>The pages about {pages} give everything needed. Conclude that the answer is {row['answer']}."
               f"</think><answer>{row['answer']}</answer>")


def miscalculated(row):
    a, b = sorted(tool_numbers(row)[:2], reverse=True)
    return f"{a} - {b} = {a - b + 1}, so that is the answer."


CASES = [
    # (id, base, mutation, expected reason)
    ("bad_json", "seq", lambda r: body(r, '<tool_call>\n{"name": "x", \n</tool_call>'), "tool_call_bad_json"),
    ("unclosed_call", "seq", lambda r: body(r, '<tool_call>\n{"name": "x", "arguments": {}}'), "tool_call_malformed"),
    ("call_not_object", "seq", lambda r: body(r, "<tool_call>\n[1, 2]\n</tool_call>"), "tool_call_malformed"),
    ("call_without_name", "seq", lambda r: body(r, '<tool_call>\n{"arguments": {}}\n</tool_call>'), "tool_call_malformed"),
    ("unopened_call", "seq", lambda r: body(r, r["messages"][assistant_idx(r)]["content"].split("</think>\n")[1] + "\n</tool_call>"), "tool_call_malformed"),
    ("unknown_tool", "seq", lambda r: set_name(r, "no_such_tool"), "unknown_tool"),
    ("missing_argument", "seq", lambda r: set_args(r, lambda a: a.pop("query")), "arguments_invalid"),
    ("extra_argument", "seq", lambda r: set_args(r, lambda a: a.update(colour="red")), "arguments_invalid"),
    ("mistyped_query", "seq", lambda r: set_args(r, lambda a: a.update(query=5)), "arguments_invalid"),
    ("mistyped_top_k", "seq", lambda r: set_args(r, lambda a: a.update(top_k="five")), "arguments_invalid"),
    ("out_of_range", "seq", lambda r: set_args(r, lambda a: a.update(top_k=99)), "arguments_invalid"),
    ("empty_query", "seq", lambda r: set_args(r, lambda a: a.update(query="")), "arguments_invalid"),
    ("tool_not_needed", "seq", lambda r: set_name(r, not_needed_tool(r)), "tool_not_needed"),
    ("assistant_tool_swapped", "seq", lambda r: swap(r, assistant_idx(r), tool_idx(r)), "role_order"),
    ("system_after_user", "seq", lambda r: swap(r, 0, 1), "role_order"),
    ("no_user", "seq", lambda r: r["messages"].pop(1), "role_order"),
    ("ends_with_tool", "seq", lambda r: r["messages"].pop(), "role_order"),
    ("two_users", "seq", lambda r: r["messages"].insert(2, {"role": "user", "content": "hi", "tool_calls": None,
                                                          "tool_call_id": None, "name": None}), "role_order"),
    ("empty_user", "seq", lambda r: set_field(r["messages"][1], "content", "  "), "empty_message"),
    ("empty_tool_message", "seq", lambda r: set_field(r["messages"][tool_idx(r)], "content", ""), "empty_message"),
    ("no_think", "seq", lambda r: set_field(r["messages"][assistant_idx(r)], "content",
                                            r["messages"][assistant_idx(r)]["content"].split("</think>\n")[1]), "think_missing"),
    ("no_think_final", "seq", lambda r: final(r, "<answer>" + r["answer"] + "</answer>"), "think_missing"),
    ("text_before_think", "seq", lambda r: final(r, "Sure. <think>x</think><answer>" + r["answer"] + "</answer>"), "think_missing"),
    ("empty_think", "seq", lambda r: final(r, "<think> </think><answer>" + r["answer"] + "</answer>"), "think_missing"),
    ("unclosed_think", "seq", lambda r: final(r, "<think>hmm <answer>" + r["answer"] + "</answer>"), "think_malformed"),
    ("two_thinks", "seq", lambda r: final(r, "<think>a</think><think>b</think><answer>" + r["answer"] + "</answer>"), "think_malformed"),
    ("text_outside_calls", "seq", lambda r: set_field(r["messages"][assistant_idx(r)], "content",
                                                      r["messages"][assistant_idx(r)]["content"] + "\nLet me check."), "text_outside_calls"),
    ("turn_without_calls", "seq", lambda r: body(r, ""), "no_tool_calls"),
    ("two_answers", "seq", lambda r: final(r, "<think>x</think><answer>a</answer><answer>b</answer>"), "answer_multiple"),
    ("no_answer", "seq", lambda r: final(r, "<think>x</think> it is " + r["answer"]), "answer_missing"),
    ("empty_answer", "seq", lambda r: final(r, "<think>x</think><answer> </answer>"), "answer_empty"),
    ("unclosed_answer", "seq", lambda r: final(r, "<think>x</think><answer>" + r["answer"]), "answer_empty"),
    ("wrong_answer", "seq", lambda r: final(r, "<think>x</think><answer>Quentin Zarvox</answer>"), "wrong_answer"),
    ("final_has_call", "seq", lambda r: final(r, "<think>x</think><tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>"), "final_not_answer"),
    ("tool_message_altered", "seq", lambda r: set_field(r["messages"][tool_idx(r)], "content",
                                                        r["messages"][tool_idx(r)]["content"].replace("a", "e", 1)), "replay_mismatch"),
    ("no_replay_key", "seq", lambda r: set_field(r, "meta", json.dumps({**json.loads(r["meta"]), "calls": {}})), "replay_failed"),
    ("tool_call_id_mismatch", "seq", lambda r: set_field(r["messages"][tool_idx(r)], "tool_call_id", "call-x"), "tool_message_mismatch"),
    ("tool_name_mismatch", "seq", lambda r: set_field(r["messages"][tool_idx(r)], "name", "other"), "tool_message_mismatch"),
    ("tool_message_missing", "par", lambda r: r["messages"].pop(tool_idx(r)), "tool_message_mismatch"),
    ("structured_args_differ", "seq", lambda r: set_field(r["messages"][assistant_idx(r)]["tool_calls"][0], "arguments", '{"query": "zzz"}'), "tool_calls_mismatch"),
    ("structured_call_extra", "seq", lambda r: r["messages"][assistant_idx(r)]["tool_calls"].append(
        dict(r["messages"][assistant_idx(r)]["tool_calls"][0])), "tool_calls_mismatch"),
    ("route_should_be_sequential", "seq", lambda r: set_field(r, "route", "parallel"), "route_mismatch"),
    ("route_should_be_parallel", "par", lambda r: set_field(r, "route", "sequential"), "route_mismatch"),
    ("unknown_route", "seq", lambda r: set_field(r, "route", "zigzag"), "unknown_route"),
    ("flag_on_valid_call", "seq", lambda r: set_field(r["messages"][assistant_idx(r)]["tool_calls"][0], "injected_error", "wrong_args:wrong_type"), "injected_error_not_an_error"),
    ("injected_error_unflagged", "wa", lambda r: [set_field(c, "injected_error", None) for c in flagged(r, "wrong_args")], "arguments_invalid"),
    ("wrong_tool_not_repaired", "wt", lambda r: set_args(r, lambda a: a.update(query="something else"),
                                                           k=1 + next(k for k in range(9) if (r["messages"][assistant_idx(r, k)]["tool_calls"][0]["injected_error"] or "") == "wrong_tool")), "injected_error_not_repaired"),
    ("repeat_of_no_earlier_call", "rep", lambda r: set_args(r, lambda a: a.update(query="Somewhere Else"), k=flagged_turn(r)),
     "injected_error_not_an_error"),
    ("repeat_made_again", "rep", repeat_again, "injected_error_not_repaired"),
    ("made_up_tool_unflagged", "unk", lambda r: [set_field(c, "injected_error", None) for c in flagged(r, "unknown_tool")],
     "unknown_tool"),
    ("made_up_tool_is_offered", "unk", lambda r: set_name(r, r["correct_tools"][0], k=flagged_turn(r, "unknown_tool")),
     "injected_error_not_an_error"),
    ("made_up_tool_not_replaced", "unk", lambda r: set_args(r, lambda a: a.update(query="Somewhere Else"),
                                                            k=flagged_turn(r, "unknown_tool")), "injected_error_not_repaired"),
    ("bad_tool_schema", "seq", lambda r: set_field(r["tools"][0], "parameters", '{"type": 5}'), "bad_tool_schema"),
    ("not_an_object", "seq", lambda r: r.clear(), "schema_violation"),
    ("schema_missing_route", "seq", lambda r: r.pop("route"), "schema_violation"),
    ("schema_bad_role", "seq", lambda r: set_field(r["messages"][1], "role", "bot"), "schema_violation"),
    ("think_invented_date", "seq", lambda r: final(r, "<think>The answer is " + r["answer"] + ", which corresponds to the "
                                                   "first page of the story. The story is set in the 1920s.</think><answer>"
                                                   + r["answer"] + "</answer>"), "think_unsupported_number"),
    ("think_invented_name", "seq", lambda r: set_think(r, "I recall that Quentin Zarvox wrote about this."), "think_unsupported_name"),
    ("think_invented_number", "seq", lambda r: set_think(r, "The page says it has 98,765 inhabitants.", k=1), "think_unsupported_number"),
    ("think_name_from_a_later_result", "seq", lambda r: set_think(r, "I expect the answer involves " + later_title(r) + "."),
     "think_unsupported_name"),
    ("think_miscalculation", "seq", lambda r: final(r, "<think>" + miscalculated(r) + "</think><answer>" + r["answer"]
                                                   + "</answer>"), "think_unsupported_number"),
    ("final_names_only_the_pages_compared", "cmp", pages_only, "final_think_states_no_fact"),
    ("final_names_only_the_pages_of_a_yes_no", "yn", pages_only, "final_think_states_no_fact"),
    ("final_only_concludes", "seq", lambda r: final(r, f"<think>Conclude that the answer is {r['answer']}.</think>"
                                                     f"<answer>{r['answer']}</answer>"), "final_think_states_no_fact"),
    ("final_names_only_the_question", "seq", lambda r: final(r, f"<think>I looked up \"{looked_up(r)[0]}\" and two more "
                                                              f"pages. So it is {r['answer']}.</think><answer>"
                                                              f"{r['answer']}</answer>"), "final_think_states_no_fact"),
    ("schema_bad_json_arguments", "seq", lambda r: set_field(r["messages"][assistant_idx(r)]["tool_calls"][0], "arguments", "{bad"), "schema_violation"),
]


@pytest.fixture(scope="module")
def bases(world):
    _, rows, _, _ = world
    first = lambda r: [m for m in r["messages"] if m["role"] == "assistant"][0]["tool_calls"]  # noqa: E731
    qtype = lambda r: json.loads(r["meta"])["qtype"]  # noqa: E731
    return {"seq": pick(rows, lambda r: r["case"] == "clean" and r["route"] == "sequential"),
            "cmp": pick(rows, lambda r: r["case"] == "clean" and qtype(r) == "comparison"),
            "yn": pick(rows, lambda r: r["case"] == "clean" and r["answer"] in ("yes", "no")),
            "par": pick(rows, lambda r: r["case"] == "clean" and r["route"] == "parallel" and len(first(r)) >= 2),
            "wa": pick(rows, lambda r: r["case"] == "wrong_args" and r["route"] == "sequential"),
            "wt": pick(rows, lambda r: r["case"] == "wrong_tool" and r["route"] == "sequential"
                       and first(r)[0]["injected_error"] is None),
            "rep": pick(of_case(world), lambda r: r["route"] == "sequential"),
            "unk": pick(of_case(world, case="unknown_tool"), lambda r: r["case"] == "unknown_tool" and r["route"] == "sequential")}


def of_case(world, case="repeat", **kw):
    """Trajectories of the world's dataset with `case` (by default the repeat case: a lookup made
    twice) wherever a plan allows it."""
    from generators.synth.synthesize import Session, SynthConfig, load_inputs

    root, _, _, bank = world
    s = Session(load_inputs(root, "w"), SynthConfig(dataset="w", n=20, calculator=True, case_mix=f"{case}=1", **kw), bank)
    rows, _ = s.trajectories(s.plans(), None, "run")
    return rows


def rules_for(rule_ctx, reasoning):
    """The rules a form's data passes: `--reasoning brief` data with `--no-final-facts` (its final
    thinks of comparisons and yes/no questions name only the pages compared)."""
    return replace(rule_ctx, final_facts=False) if reasoning == "brief" else rule_ctx


@pytest.mark.parametrize("reasoning", ["facts", "brief", "plan"])
def test_repeat_case_passes_every_rule_layer(world, rule_ctx, reasoning):
    """A call made twice, flagged `repeated_call`, with the think after it saying so, passes every
    rule; the second call is the first one again, word for word, and brings back the same result."""
    rows = of_case(world, reasoning=reasoning, texts="template", first_search="general")
    assert {r["case"] for r in rows} == {"repeat"}
    rule_ctx = rules_for(rule_ctx, reasoning)
    for r in rows:
        assert first_fail(r, rule_ctx) is None, (r["route"], first_fail(r, rule_ctx))
        k = flagged_turn(r)
        msgs = r["messages"]
        first, second = msgs[assistant_idx(r, k - 1)], msgs[assistant_idx(r, k)]
        call = second["tool_calls"][0]
        assert any(c["name"] == call["name"] and c["arguments"] == call["arguments"] for c in first["tool_calls"])
        assert second["content"].split("</think>")[0] == first["content"].split("</think>")[0]  # the same think
        results = {m["tool_call_id"]: m["content"] for m in msgs if m["role"] == "tool"}
        assert results[call["id"]] in [results[c["id"]] for c in first["tool_calls"] if c["arguments"] == call["arguments"]]
        assert "is the same page about" in msgs[assistant_idx(r, k + 1)]["content"]


@pytest.mark.parametrize("reasoning", ["facts", "brief", "plan"])
def test_made_up_tool_case_passes_every_rule_layer(world, rule_ctx, reasoning):
    """The unknown_tool case: a later lookup calls a tool that is not offered, named after the kind
    of its page; the simulator answers unknown_tool and the next turn makes the same lookup with
    the general search, which finds the page. It passes every rule."""
    rows = [r for r in of_case(world, case="unknown_tool", reasoning=reasoning, texts="template", first_search="general")
            if r["case"] == "unknown_tool"]
    assert len(rows) >= 10, len(rows)
    rule_ctx = rules_for(rule_ctx, reasoning)
    offered = lambda r: {t["name"] for t in r["tools"]}  # noqa: E731
    general = {t["name"] for t in world[3] if t["domain"] == "general"}  # the bank's general searches
    for r in rows:
        assert first_fail(r, rule_ctx) is None, (r["route"], first_fail(r, rule_ctx))
        made_up = flagged(r, "unknown_tool")
        assert len(made_up) == 1 and made_up[0]["name"].startswith("search_") and made_up[0]["name"] not in offered(r)
        msgs = r["messages"]
        result = next(m["content"] for m in msgs if m.get("tool_call_id") == made_up[0]["id"])
        assert json.loads(result)["error"] == "unknown_tool"
        at = next(i for i, m in enumerate(msgs) if m["tool_calls"] and made_up[0] in m["tool_calls"])
        after = next(m for m in msgs[at + 1:] if m["role"] == "assistant")
        assert f"There is no tool named {made_up[0]['name']}" in after["content"]
        (call,) = after["tool_calls"]
        assert call["name"] in general & offered(r)
        assert json.loads(call["arguments"])["query"] == json.loads(made_up[0]["arguments"])["query"]
        assert made_up[0]["name"] not in r["correct_tools"]


def test_at_least_forty_cases_with_documented_codes():
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)
    assert all(c[3] in REASONS for c in CASES)


@pytest.mark.parametrize("name,base,mutate,expected", CASES, ids=[c[0] for c in CASES])
def test_corrupted_trajectory_is_rejected_with_reason(name, base, mutate, expected, bases, rule_ctx):
    row = copy.deepcopy(bases[base])
    assert first_fail(row, rule_ctx) is None
    mutate(row)
    v = first_fail(row, rule_ctx)
    assert v is not None, name
    assert v.reason == expected, (name, v)
    assert v.reason in REASONS


def test_grounded_rewording_of_the_reasoning_passes(bases, rule_ctx):
    row = copy.deepcopy(bases["seq"])
    a, b = sorted(tool_numbers(row)[:2], reverse=True)
    set_think(row, "First I search for the page the question names.")
    final(row, f"<think>The pages give {a} and {b}; {a} - {b} = {a - b}. That settles it.</think>"
               f"<answer>{row['answer']}</answer>")
    assert first_fail(row, rule_ctx) is None


def test_not_an_object_and_paraphrased_answer(bases, rule_ctx):
    assert check_schema(["a", "list"], "trajectories").reason == "not_an_object"
    row = copy.deepcopy(bases["seq"])
    think = row["messages"][-1]["content"].split("</think>")[0]
    final(row, think + "</think><answer>The " + row["answer"].upper() + ".</answer>")  # case, article, punctuation
    assert first_fail(row, rule_ctx) is None

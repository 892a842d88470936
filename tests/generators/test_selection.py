"""Which triples synthesis picks: `--rounds-weight` favours long questions within each
route's quota, `--kinds-in-turn` lets the kinds of question of a route take turns,
`--asks-in-turn` what the questions of a kind ask of their last page, and `--hold-out` keeps
a test split out of every trajectory. A real world corpus, tool bank and planner; no model
(plans only)."""

import json
from collections import Counter
from dataclasses import replace

import pytest

from generators.corpus.build import WorldConfig, write
from generators.corpus.questions import question_ask
from generators.synth import plan as planning
from generators.synth.synthesize import Session, SynthConfig, load_inputs
from generators.tools.bank import build_bank


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write(WorldConfig(seed=11, entities=400), root, "w")
    return load_inputs(root, "w")


@pytest.fixture(scope="module")
def tools():
    return build_bank(seed=3, variants_per_tool=0, calculator=True)


CFG = SynthConfig(dataset="w", n=80, seed=5, calculator=True)


def picked(inputs, tools, **changes) -> list[planning.Plan]:
    return Session(inputs, replace(CFG, **changes), tools).plans()


def test_rounds_weight_favours_long_plans_within_each_routes_quota(inputs, tools):
    every = Session(inputs, replace(CFG, n=10_000), tools).plans()
    uniform, weighted = picked(inputs, tools), picked(inputs, tools, rounds_weight=4)
    assert len(uniform) == len(weighted) == 80
    pool, routes = Counter(p.route for p in every), Counter(p.route for p in weighted)
    for route, share in planning.DEFAULT_ROUTE_MIX.items():  # each route gets its quota as far as its pool allows
        assert routes[route] >= min(round(80 * share), pool[route])

    def long(plans):
        return sum(len(p.rounds) >= 3 for p in plans)

    assert long(every) > 80 and long(weighted) > long(uniform)  # there are long plans to favour
    assert picked(inputs, tools, rounds_weight=4) == weighted  # deterministic
    same_length = replace(CFG, route_mix="single=1")  # every single plan has one round: weights change nothing
    assert Session(inputs, replace(same_length, rounds_weight=4), tools).plans() == Session(inputs, same_length, tools).plans()


def test_kinds_in_turn_gives_the_rare_kinds_of_a_route_their_share(inputs, tools):
    every = Session(inputs, replace(CFG, n=10_000), tools)
    pool = Counter(every.kind(p) for p in every.plans())
    s = Session(inputs, replace(CFG, kinds_in_turn=True), tools)
    uniform, in_turn = Counter(map(s.kind, picked(inputs, tools))), Counter(map(s.kind, s.plans()))
    assert sum(in_turn.values()) == 80
    rare = min(pool, key=pool.get)  # the kind with fewest triples
    assert in_turn[rare] > uniform[rare] and in_turn[rare] <= pool[rare]
    assert max(in_turn.values()) < max(uniform.values())  # the largest kind no longer crowds the others out
    assert s.plans() == s.plans()  # deterministic
    assert set(in_turn) == set(pool)  # every kind is drawn


def test_in_turn_keeps_the_order_within_a_kind():
    plans = [planning.Plan(f"t{i}", [], "single") for i in range(7)]
    kind = {"t0": "a", "t1": "a", "t2": "a", "t3": "b", "t4": "a", "t5": "c", "t6": "b"}
    assert [p.triple_id for p in planning.in_turn(plans, lambda p: kind[p.triple_id])] == \
        ["t0", "t3", "t5", "t1", "t6", "t2", "t4"]


def test_asks_in_turn_spreads_what_each_kind_asks(inputs, tools):
    kinds = Session(inputs, replace(CFG, kinds_in_turn=True), tools)
    asks = Session(inputs, replace(CFG, kinds_in_turn=True, asks_in_turn=True), tools)
    before, after = kinds.plans(), asks.plans()
    assert len(after) == 80 and asks.plans() == after  # deterministic
    by_kind = Counter(map(kinds.kind, before))
    assert all(abs(Counter(map(kinds.kind, after))[k] - by_kind[k]) <= 1 for k in by_kind)  # kinds still take turns
    bridges = [k for k in by_kind if k.startswith("bridge/")]

    def spread(plans):  # (commonest ask's count, asks drawn) over the bridges
        c = Counter(asks.ask(p) for p in plans if asks.kind(p) in bridges)
        return max(c.values()), len(c)

    (top_before, n_before), (top_after, n_after) = spread(before), spread(after)
    assert top_after < top_before and n_after >= n_before
    def drawn(plans, k):  # the different asks a kind draws
        return {asks.ask(p) for p in plans if asks.kind(p) == k}

    assert all(len(drawn(after, k)) >= len(drawn(before, k)) for k in bridges)


def test_asks_take_turns_within_each_kind():
    plans = [planning.Plan(f"t{i}", [], "single") for i in range(8)]
    kind = dict(zip([f"t{i}" for i in range(8)], "aaaabbba"))
    ask = dict(zip([f"t{i}" for i in range(8)], "xxyxzzyy"))
    order = planning.turns(plans, lambda p: kind[p.triple_id], lambda p: ask[p.triple_id])
    assert [p.triple_id for p in order] == ["t0", "t4", "t2", "t6", "t1", "t5", "t7", "t3"]
    assert [p.triple_id for p in planning.turns(plans, None, lambda p: ask[p.triple_id])] == \
        ["t0", "t2", "t4", "t1", "t5", "t6", "t3", "t7"]
    assert planning.turns(plans, None, None) == plans


def test_question_ask_is_the_relation_of_the_answer():
    def triple(relations):
        return {"meta": json.dumps({"relations": relations})}

    assert question_ask(triple(["country", "population"])) == "population"
    assert question_ask(triple([["founder", "birth_year"], ["headquarters", "founded"]])) == "founded"  # years between
    assert question_ask({"meta": json.dumps({"phrases": {}})}) == "?"  # a comparison names no relation
    assert question_ask({}) == question_ask({"meta": "not json"}) == "?"  # an imported triple


def test_negative_rounds_weight_is_refused():
    with pytest.raises(ValueError, match="--rounds-weight must be >= 0"):
        SynthConfig(rounds_weight=-1)
    with pytest.raises(ValueError, match="rounds weight must be >= 0"):
        planning.select_by_route([], 1, planning.DEFAULT_ROUTE_MIX, 0, rounds_weight=-0.5)


def test_held_out_triples_are_never_planned(inputs, tools, tmp_path):
    uniform = picked(inputs, tools)
    held = sorted(p.triple_id for p in uniform)[:20]  # triples the uniform draw would use
    split = tmp_path / "held.txt"
    split.write_text("# the test split\n" + "\n".join(held) + "\n\n")
    s = Session(inputs, replace(CFG, hold_out=str(split)), tools)
    plans = s.plans()
    assert s.held_out == set(held) and len(plans) == 80
    assert not {p.triple_id for p in plans} & set(held)
    assert not {p.triple_id for p in picked(inputs, tools, rounds_weight=4, hold_out=str(split))} & set(held)


def test_a_bad_hold_out_file_is_a_clear_error(inputs, tools, tmp_path):
    with pytest.raises(ValueError, match="cannot be read"):
        Session(inputs, replace(CFG, hold_out=str(tmp_path / "missing.txt")), tools)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n# nothing\n")
    with pytest.raises(ValueError, match="holds no id"):
        Session(inputs, replace(CFG, hold_out=str(empty)), tools)
    stray = tmp_path / "stray.txt"
    stray.write_text(inputs.triples[0]["triple_id"] + "\ntri-not-in-this-world\n")
    with pytest.raises(ValueError, match="1 triple ids that dataset 'w' does not hold, e.g. 'tri-not-in-this-world'"):
        Session(inputs, replace(CFG, hold_out=str(stray)), tools)

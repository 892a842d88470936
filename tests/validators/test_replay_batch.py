"""Batched replay (validators/replay.py, `check_trajectories`) gives exactly the verdicts of
replaying call by call (`check_trajectory`): on every corruption of the rules' corruption table,
on more than a thousand good trajectories (several per triple), and on random batches of both."""

import copy
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.validators.conftest import world_context
from tests.validators.test_trajectory_rules import CASES, bases  # noqa: F401 (a fixture)
from validators.trajectory_rules import RuleContext, check_trajectories, check_trajectory


def _ctx(world) -> RuleContext:
    return world_context(world)


def _table(verdicts):
    return [[(v.layer, v.check, v.passed, v.code, v.detail_text()) for v in vs] for vs in verdicts]


@pytest.fixture(scope="module")
def many(world):
    """1,000 good trajectories: 10 of each of the world's 100 triples (routes, cases, offers)."""
    from generators.synth.synthesize import Session, SynthConfig, load_inputs

    root, _, _, bank = world
    s = Session(load_inputs(root, "w"), SynthConfig(dataset="w", n=1000, per_triple=10, calculator=True,
                                                    texts="template"), bank)
    rows, _ = s.trajectories(s.plans(), None, "run")
    return rows


@pytest.fixture(scope="module")
def corrupted(bases):
    out = []
    for name, base, mutate, _ in CASES:
        row = copy.deepcopy(bases[base])
        mutate(row)
        out.append(row)
    return out


def test_batched_replay_equals_call_by_call_on_the_corruption_table(corrupted, world):
    one_by_one = [check_trajectory(r, _ctx(world)) for r in corrupted]
    assert _table(check_trajectories(corrupted, _ctx(world))) == _table(one_by_one)
    assert sum(not vs[-1].passed for vs in one_by_one) == len(CASES)  # each is rejected, as the table says
    assert any(vs[-1].code == "replay_mismatch" for vs in one_by_one)


def test_batched_replay_equals_call_by_call_on_many_good_trajectories(many, world):
    assert len(many) >= 1000 and len({r["traj_id"] for r in many}) == len(many)
    batched = check_trajectories(many, _ctx(world))
    assert _table(batched) == _table([check_trajectory(r, _ctx(world)) for r in many])
    assert all(vs[-1].passed and vs[4].check == "replay" and vs[4].detail["calls"] >= 1 for vs in batched)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_batches_of_good_and_corrupted_trajectories(data, many, corrupted, world):
    rows = data.draw(st.lists(st.sampled_from(many + corrupted), min_size=1, max_size=40))
    rng = random.Random(data.draw(st.integers(0, 10**6)))
    rows = [copy.deepcopy(r) for r in rows]
    for r in rows:  # a tool message changed at random: replay must notice it in a batch too
        if rng.random() < 0.2:  # (a corrupted row may have no messages, or broken ones)
            msgs = r.get("messages") if isinstance(r.get("messages"), list) else []
            tools = [m for m in msgs if isinstance(m, dict) and m.get("role") == "tool"
                     and isinstance(m.get("content"), str)]
            if tools:
                rng.choice(tools)["content"] += " "
    assert _table(check_trajectories(rows, _ctx(world))) == _table([check_trajectory(r, _ctx(world)) for r in rows])


def test_the_plain_texts_replay_keeps_for_grounding_are_how_grounding_reads_the_messages(many, world):
    """Each search answer of a batch comes with its plain text (Simulator.answers), which the
    grounding step reads instead of parsing the message: it is `plain_text` of the message;
    errors and the calculator's results get none (they are parsed); the replay step hands
    each replayed message's text on by the message; `forget` drops them."""
    from generators.synth.grounding import plain_text
    from storage.schema import meta_of
    from validators.replay import replay, replay_requests
    from validators.trajectory_format import parse, structure

    ctx = _ctx(world)
    parsed = [parse(structure(r)) for r in many[:300]]
    ctx.prefetch([q for r, p in zip(many, parsed) for q in replay_requests(p, meta_of(r))])
    answers = [a for a in ctx._replays.values() if isinstance(a, str)]
    searches = [a for a in answers if a.startswith('{"results"')]
    assert len(searches) > 300 and len(searches) < len(answers)  # (the calculator's answers are among them)
    assert set(ctx.texts) == set(searches)
    assert all(ctx.texts[a] == plain_text(a) for a in searches)
    for r, p in zip(many, parsed):  # the replay step hands each replayed search message's text on
        plain: dict = {}
        assert replay(p, ctx, meta_of(r), plain).passed
        tools = [t for turn in p.tool_msgs for t in turn]
        assert plain == {id(t): plain_text(t["content"]) for t in tools if t["content"].startswith('{"results"')}
    ctx.forget()
    assert not ctx.texts and not ctx._replays

"""The counts experiments/reading.py reads from evaluation rollouts, over conversations whose
tool messages come from the real simulator of the shared small world."""

import json

import pytest

from experiments.reading import announced, chains, kinds, searches
from generators.tools.bank import build_bank
from generators.tools.compute import NAME as CALCULATOR
from generators.tools.simulator import Simulator
from storage import load_table


@pytest.fixture(scope="module")
def sim(world_root):
    return Simulator(load_table("w", "documents", world_root).to_pylist(), seed=0,
                     tools=build_bank(seed=0, variants_per_tool=0))


def _page(sim, domain: str) -> str:
    """Title of the first page of a domain (its entity type)."""
    return next(t for d, t in zip(sim.doc_ids, sim.titles) if sim.domain_of(d) == domain)


def _tool(sim, domain: str) -> str:
    return next(name for name, (dom, _, _) in sim.tools.items() if dom == domain and name != domain)


def _turn(sim, think: str, calls: list[tuple[str, str]]) -> list[dict]:
    """An assistant turn making `calls` (tool, query) in parallel, and the simulator's answers."""
    text = f"<think>{think}</think>\n" + "\n".join(
        f"<tool_call>\n{json.dumps({'name': t, 'arguments': {'query': q, 'top_k': 1}})}\n</tool_call>" for t, q in calls)
    return [{"role": "assistant", "content": text},
            *({"role": "tool", "name": t, "content": sim.call(t, {"query": q, "top_k": 1})} for t, q in calls)]


def test_each_search_is_counted_by_where_the_page_it_named_went(sim):
    person, place = _page(sim, "person"), _page(sim, "place")
    conversation = [{"role": "user", "content": "q"},
                    *_turn(sim, "look", [(_tool(sim, "person"), person), (_tool(sim, "person"), place)]),
                    *_turn(sim, "again", [(_tool(sim, "general"), "Nowhere Whatsoever"), (CALCULATOR, "1 + 2")])]
    # a search answered with another place: the tool can see the page but ranked another first
    ranked = _turn(sim, "once more", [(_tool(sim, "place"), place)])
    other = next(t for d, t in zip(sim.doc_ids, sim.titles) if sim.domain_of(d) == "place" and t != place)
    ranked[1]["content"] = sim.call(_tool(sim, "place"), {"query": other, "top_k": 1})
    got = searches([conversation, ranked], sim)
    assert got == {"searches": 4, "found the page it named": 1, "its tool cannot see the page": 1,
                   "its query is no page's title": 1, "the page was not ranked first": 1}


def test_the_kind_a_think_gives_a_lookup_is_checked_against_the_page(sim):
    person, place, work = _page(sim, "person"), _page(sim, "place"), _page(sim, "work")
    think = (f'Now I need to look up "{person}", a person, then "{place}" (a creative work) and "{work}" '
             f'(a creative work); later "{person}" and "{place}", both places, and "Nowhere Whatsoever", an event.')
    assert announced(think) == [(person, "person"), (place, "work"), (work, "work"), ("Nowhere Whatsoever", "event"),
                                (person, "place"), (place, "place")]
    conversation = [{"role": "assistant", "content": f"<think>{think}</think>\n<answer>x</answer>"}]
    assert kinds([conversation], sim) == {"announced with a kind": 6, "the right kind": 3, "the wrong kind": 2,
                                          "no page has that name": 1}


def test_a_call_is_checked_against_the_kind_its_think_gave(sim):
    """After '"A" and "B", both people' the second call may take another tool than the think's kind."""
    person, other = _page(sim, "person"), [t for d, t in zip(sim.doc_ids, sim.titles) if sim.domain_of(d) == "person"][1]
    turn = _turn(sim, f'I will search for "{person}" and "{other}", both people.',
                 [(_tool(sim, "person"), person), (_tool(sim, "organisation"), other)])
    got = kinds([turn], sim)
    assert got["its call took the tool of that kind"] == 1 and got["its call took another tool"] == 1, got
    assert got["announced with a kind"] == 2 and got["the right kind"] == 2


def test_a_chain_counts_as_found_only_when_every_needed_page_came_back(sim):
    general = _tool(sim, "general")
    both = _turn(sim, "look, then compute it with the calculator", [(general, sim.titles[0]), (general, sim.titles[1])])
    one = _turn(sim, "look", [(general, sim.titles[0])])
    asks = _turn(sim, "The question asks for the number of people living in it. Look", [(general, sim.titles[0])])
    golden = [json.loads(m["content"])["results"][0]["doc_id"] for m in both[1:]]
    assert len(set(golden)) == 2
    tri = {"qtype": "bridge", "golden_doc_ids": golden}
    then_compute = both + [{"role": "assistant", "content": "<think>That was the last lookup.</think>\n<tool_call>\n"
                            + json.dumps({"name": CALCULATOR, "arguments": {"expression": "1 + 2"}}) + "\n</tool_call>"}]
    got = chains([tri, tri, tri | {"qtype": "comparison"}, tri, tri, tri],
                 [both, one, one, asks, both + one, then_compute],
                 ["answer", "answer", "turn_limit", "turn_limit", "turn_limit", "answer"])
    assert got["bridge"] == {"rollouts": 5, "found every needed page": 3, "answered": 3,
                             "searched on after finding every needed page": 1,  # both + one; not the calculator
                             "answered before finding every needed page": 1, "first think plans the calculator": 3,
                             "first think opens as a computed answer's": 1}
    assert got["comparison"] == {"rollouts": 1, "found every needed page": 0, "answered": 0,
                                 "searched on after finding every needed page": 0,
                                 "answered before finding every needed page": 0, "first think plans the calculator": 0,
                                 "first think opens as a computed answer's": 0}

"""Plans: which documents a trajectory looks up, in which rounds, and with which case.

A triple's structure decides its route. For world triples the relation program (meta
"program") is traced over the facts of the golden documents: every entity a chain reads is
one lookup, chains that do not depend on each other run side by side. For imported
triples (no program) the question type decides: comparison looks up every golden document
in one round, anything else one document per round in supporting-fact order.

    rounds of lookups           route
    one lookup                  single
    one round, several lookups  parallel
    several rounds, one each    sequential
    several rounds, some wide   mixed

An answer computed from the facts (the years between two dates) adds a last round: one call
of the calculator (generators/tools/compute.py) with the arithmetic, which counts in the
route like a lookup, since the conversation makes it after the lookups it depends on.

The reflection case is drawn from a configurable mix among the cases the plan allows,
deterministically per (seed, triple). `select_by_route` picks the plans a run makes: routes
follow their mix, and within a route long plans may be favoured (`rounds_weight`) and the kinds
of question may take turns (`in_turn`).

A triple can give several trajectories: `variant_of(plan, v, ...)` is its v-th (v = 0 is the
plan itself). A variant draws its own case from the mix, takes the sequential route on odd v
where the plan has a round of several lookups (they do not depend on each other, so one at a
time is a route too), and its skeleton its own offered tools, distractors and arguments (the
builder's random draws are salted with v), so no two variants of a triple are the same
conversation.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from generators.synth.cases import CASES
from generators.tools.compute import COMPUTE

ROUTES = ("single", "parallel", "sequential", "mixed")
DEFAULT_CASE_MIX = {"clean": 0.4, "wrong_args": 0.15, "wrong_tool": 0.15, "escalation": 0.15, "early_stop": 0.15}
DEFAULT_ROUTE_MIX = {"single": 0.1, "parallel": 0.2, "sequential": 0.45, "mixed": 0.25}


@dataclass
class Hop:
    """One lookup: the golden document it must find, the query that finds it, the domain of
    the tool that can see it."""

    doc_id: str  # "" for a calculator call
    query: str  # for a calculator call, the arithmetic
    domain: str

    @property
    def compute(self) -> bool:
        return self.domain == COMPUTE


def compute_hop(expression: str) -> Hop:
    """The calculator call that computes the answer from the looked-up facts."""
    return Hop("", expression, COMPUTE)


@dataclass
class Plan:
    triple_id: str
    rounds: list[list[Hop]]
    route: str = ""
    case: str = "clean"
    allowed: list[str] = field(default_factory=list)
    variant: int = 0  # the how-many-th trajectory of its triple (variant_of)

    @property
    def hops(self) -> list[Hop]:
        return [h for r in self.rounds for h in r]

    @property
    def lookups(self) -> list[list[Hop]]:
        """The rounds of searches (without the calculator's round)."""
        return [r for r in self.rounds if not any(h.compute for h in r)]

    @property
    def computed(self) -> Hop | None:
        """The calculator call, if the answer is computed."""
        return next((h for h in self.hops if h.compute), None)


def route_of(rounds: list[list[Hop]]) -> str:
    calls = sum(len(r) for r in rounds)
    if calls <= 1:
        return "single"
    if len(rounds) == 1:
        return "parallel"
    if all(len(r) == 1 for r in rounds):
        return "sequential"
    return "mixed"


def chains_of(program) -> list[list]:
    """The relation chains a world program reads, in reading order."""
    if isinstance(program, list):
        return [program]
    if not isinstance(program, dict) or "const" in program:
        return []
    if program.get("op") in ("argmin", "argmax"):
        return [c["chain"] for c in program["candidates"]]
    return [c for arg in program.get("args", []) for c in chains_of(arg)]


def _subjects(chain: list, facts) -> list[str]:
    """Entity names a chain looks up, in order (a subject read twice in a row is one lookup)."""
    value, subjects = None, []
    for subject, rel in chain:
        if subject == "?":
            subject = value
        if not subjects or subjects[-1] != subject:
            subjects.append(subject)
        value = facts.get(subject, rel)
    return subjects


def _norm_title(s: str) -> str:
    s = " ".join(str(s).split()).lower()
    return s[4:] if s.startswith("the ") else s


def program_rounds(triple: dict, program, docs: dict[str, dict], domain_of: Callable[[str], str],
                   facts) -> list[list[Hop]]:
    """Rounds for a world triple with `program` (its meta's): lookup i of every chain goes to
    round i."""
    by_title = {_norm_title(docs[d]["title"]): d for d in triple["golden_doc_ids"] if d in docs}
    rounds: list[list[Hop]] = []
    seen: set[str] = set()
    for chain in chains_of(program):
        for i, subject in enumerate(_subjects(chain, facts)):
            doc_id = by_title.get(_norm_title(subject))
            if doc_id is None:
                raise ValueError(f"triple {triple['triple_id']}: no golden document titled {subject!r}")
            if doc_id in seen:
                continue
            seen.add(doc_id)
            while len(rounds) <= i:
                rounds.append([])
            rounds[i].append(Hop(doc_id, docs[doc_id]["title"], domain_of(doc_id)))
    return [r for r in rounds if r]


def structural_rounds(triple: dict, docs: dict[str, dict], domain_of: Callable[[str], str]) -> list[list[Hop]]:
    """Rounds for an imported triple, from its question type and supporting-fact order."""
    order = list(dict.fromkeys([f["doc_id"] for f in triple.get("supporting_facts") or []]
                               + list(triple["golden_doc_ids"])))
    hops = [Hop(d, docs[d]["title"], domain_of(d)) for d in order if d in docs]
    if str(triple.get("qtype", "")).lower().startswith("comparison"):
        return [hops]
    return [[h] for h in hops]


def allowed_cases(plan: Plan) -> list[str]:
    """The cases a plan can take (each case's own rule, generators/synth/cases.py)."""
    lookups = plan.lookups
    return [name for name, case in CASES.items() if case.allows(lookups)]


def _unit(*parts) -> float:
    h = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
    return int(h[:13], 16) / 16 ** 13


def choose_case(plan: Plan, mix: dict[str, float], seed: int) -> str:
    """A case from `mix`, renormalised over the cases this plan allows; deterministic per
    (seed, triple, variant)."""
    weights = {c: mix.get(c, 0.0) for c in plan.allowed if mix.get(c, 0.0) > 0}
    if not weights:
        return "clean"
    salt = ("case",) if not plan.variant else ("case", plan.variant)
    u, acc, total = _unit(seed, plan.triple_id, *salt), 0.0, sum(weights.values())
    for c in CASES:  # the registry's order: a case added at its end leaves the draws of the others alone
        if c in weights:
            acc += weights[c] / total
            if u < acc:
                return c
    return list(weights)[-1]


def variant_of(plan: Plan, v: int, mix: dict[str, float], seed: int) -> Plan:
    """The v-th trajectory plan of `plan`'s triple (module docstring); v = 0 is `plan`."""
    if v == 0:
        return plan
    rounds = plan.rounds
    if v % 2 and any(len(r) > 1 for r in rounds):  # one lookup at a time (a calculator round stays last)
        rounds = [[h] for r in rounds for h in r]
    out = Plan(plan.triple_id, rounds, route_of(rounds), variant=v)
    out.allowed = allowed_cases(out)
    if "wrong_tool" not in plan.allowed:  # the bank has no other domain's tool to get wrong
        out.allowed = [c for c in out.allowed if c not in ("wrong_tool", "escalation")]
    out.case = choose_case(out, mix, seed)
    return out


def parse_mix(text: str | dict, known: tuple[str, ...]) -> dict[str, float]:
    """'clean=0.4,wrong_args=0.2' -> {'clean': 0.4, 'wrong_args': 0.2}; unknown names raise."""
    if isinstance(text, dict):
        mix = {k: float(v) for k, v in text.items()}
    else:
        mix = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, _, value = part.partition("=")
            try:
                mix[name.strip()] = float(value)
            except ValueError:
                raise ValueError(f"bad mix entry {part!r}: use name=weight") from None
    unknown = set(mix) - set(known)
    if unknown:
        raise ValueError(f"unknown names {sorted(unknown)} in mix; known: {', '.join(known)}")
    if any(v < 0 for v in mix.values()) or not sum(mix.values()):
        raise ValueError("mix weights must be >= 0 and not all zero")
    return mix


def select_by_route(plans: list[Plan], n: int, route_mix: dict[str, float], seed: int,
                    rounds_weight: float = 0.0, kind: Callable[[Plan], str] | None = None,
                    ask: Callable[[Plan], str] | None = None) -> list[Plan]:
    """Pick n plans so routes follow `route_mix` as far as the pool allows; deterministic.
    Within a route, plans are drawn without replacement with weight (tool rounds) **
    `rounds_weight`: 0 draws uniformly, a larger value favours plans of more rounds (a
    calculator call is a round). With `kind` (a plan's kind of question, e.g. its type and
    hop count) the kinds of a route take turns, so a kind with few triples gets as many as
    the others while it lasts (`in_turn`); with `ask` (what a plan's question asks of its last
    page) the asks take turns within each kind (or within the route, without `kind`)."""
    if rounds_weight < 0:
        raise ValueError(f"rounds weight must be >= 0, not {rounds_weight}")

    def order(p: Plan, salt: str) -> float:  # an exponential clock: a heavier plan tends to come first
        return -math.log1p(-_unit(seed, p.triple_id, salt)) / len(p.rounds) ** rounds_weight

    pools: dict[str, list[Plan]] = {r: [] for r in ROUTES}
    for p in sorted(plans, key=lambda p: order(p, "pick")):
        pools[p.route].append(p)
    pools = {r: turns(ps, kind, ask) for r, ps in pools.items()}
    total = sum(route_mix.get(r, 0.0) for r in ROUTES) or 1.0
    want = {r: int(round(n * route_mix.get(r, 0.0) / total)) for r in ROUTES}
    picked: list[Plan] = []
    for r in ROUTES:
        picked += pools[r][: want[r]]
    leftovers = [p for r in ROUTES for p in pools[r][want[r]:] if route_mix.get(r, 0.0) > 0]
    leftovers = turns(sorted(leftovers, key=lambda p: order(p, "fill")), kind, ask)
    picked += leftovers[: max(0, n - len(picked))]
    return picked[:n]


def turns(plans: list[Plan], kind: Callable[[Plan], str] | None, ask: Callable[[Plan], str] | None) -> list[Plan]:
    """`plans` with their asks taking turns within each kind, then the kinds taking turns (which
    keeps each kind's order), as far as `kind` and `ask` are given."""
    if ask is not None:
        plans = in_turn(plans, ask if kind is None else lambda p: (kind(p), ask(p)))
    return plans if kind is None else in_turn(plans, kind)


def in_turn(plans: list, kind: Callable[[Any], Hashable]) -> list:
    """`plans` (or any items) reordered so their kinds take turns: the first of every kind, then
    the second of every kind, ...; within a kind, and within a turn, the order is kept."""
    seen: dict[Hashable, int] = {}
    ranked = []
    for i, p in enumerate(plans):
        k = kind(p)
        ranked.append((seen.get(k, 0), i, p))
        seen[k] = seen.get(k, 0) + 1
    return [p for _, _, p in sorted(ranked, key=lambda x: x[:2])]

"""Trajectory skeletons: every tool call, argument, injected error and tool result, built by
the program from a plan, the tool bank and the simulator. Only the reasoning (`<think>`)
and the final answer wording are left as slots for the LLM.

The reflection cases (clean, wrong_args, wrong_tool, escalation, early_stop, repeat,
unknown_tool) are declared in generators/synth/cases.py: `build` runs one loop over the plan's
rounds and asks the plan's case for its call at each hop, the turns that repair its error, and
what comes after a round; a `Draft` is the skeleton in the making that a case acts on.

A computed answer's skeleton ends with a turn that calls the calculator with the arithmetic
(generators/tools/compute.py; slot kind `compute`); no case puts its error there.

Every call records what the simulator needs to replay it byte for byte (tool, arguments,
mode, golden ids, supporting sentences, answers). Every slot carries its sources, the question
and the tool results before it, against which model text is checked. With the evidence
(`--reasoning evidence`, generators/synth/evidence.py) slots also carry what their reasoning
states: what each next lookup is, the facts of the pages just read (`next`, `early_stop`),
and every fact and the derivation (the final slot); with `--reasoning facts` only the final
slot does (every fact and the steps that decide the answer).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass, field, replace

from generators.synth.cases import CASES
from generators.synth.evidence import Evidence
from generators.synth.plan import Hop, Plan
from generators.synth.steps import Call, Slot, Turn
from generators.tools.base import DOMAINS, GENERAL
from generators.tools.compute import COMPUTE
from generators.tools.fill import check_arguments, fill_arguments, schema_of
from generators.tools.sim_call import SimCall
from storage.schema import meta_of


@dataclass
class Skeleton:
    plan: Plan
    triple: dict
    offered: list[dict]
    correct: list[str]
    turns: list[Turn]
    final: Slot
    answer: Slot
    seed: int
    needed: list[str] = field(default_factory=list)  # names of the right tool per needed domain


def _read(ev: Evidence, hops: list[Hop]) -> list[str]:
    """What the pages of `hops` state for the reasoning, in page order."""
    return [s for h in hops for s in ev.read.get(h.doc_id, [])]


def _phrases(triple: dict, rounds: list[list[Hop]]) -> dict[str, str]:
    """How the question names each lookup ("the founder of Dasta"), by lookup, from the world
    triple's meta "phrases"; empty unless every lookup has one (imported triples have none, nor do
    the yes/no inference rules)."""
    said = {k.lower(): v for k, v in (meta_of(triple).get("phrases") or {}).items()}
    hops = [h.query for r in rounds for h in r]
    return {q: said[q.lower()] for q in hops} if all(q.lower() in said for q in hops) else {}


def _asks(question: str, phrase: str, name: str) -> str:
    """The question about the last page read, by its name: "When was the capital of Gromora founded?"
    with the capital read as "Valor" is "When was Valor founded?"; "" when the question does not
    name it by `phrase`."""
    return question.replace(phrase, name, 1) if phrase and phrase in question else ""


def _operands(steps: list[str]) -> list[str]:
    """The numbers of an arithmetic step ("1863 - 1783 = 80." -> 1863, 1783, 80)."""
    return [n for s in steps for n in re.findall(r"\d[\d,]*", s)]


def _rng(seed: int, *parts) -> random.Random:
    h = hashlib.sha256(json.dumps([seed, *parts], sort_keys=True).encode()).hexdigest()
    return random.Random(int(h[:16], 16))


class SkeletonBuilder:
    """Builds skeletons for plans; holds the bank and the simulator."""

    def __init__(self, simulator, tools: list[dict], seed: int = 0, distractors: tuple[int, int] = (3, 8),
                 top_k_rate: float = 0.3, top_k_choices: tuple[int, ...] = (3, 5, 8)):
        self.sim, self.seed, self.distractors, self.top_k_rate = simulator, seed, distractors, top_k_rate
        self.top_k_choices = tuple(top_k_choices)
        self.by_domain: dict[str, list[dict]] = {d: [] for d in DOMAINS}
        for t in sorted(tools, key=lambda t: t["tool_id"]):
            self.by_domain.setdefault(t["domain"], []).append(t)
        # the world's domains, then those of a corpus bank (generators/tools/corpus_bank.py)
        self.domains = (*DOMAINS, *sorted(d for d in self.by_domain if d not in DOMAINS and d != COMPUTE))

    # -- tools -------------------------------------------------------------------------
    def _offer(self, rng: random.Random, needed: list[str], wrong: str | None) -> tuple[dict[str, dict], list[dict], dict | None]:
        chosen = {d: rng.choice(self.by_domain[d]) for d in needed}
        others = [d for d in (*self.domains, COMPUTE) if d not in needed and self.by_domain.get(d)]
        wrong_tool = rng.choice(self.by_domain[wrong]) if wrong else None
        lo, hi = self.distractors
        n = rng.randint(lo, hi)
        pool = [t for d in others for t in self.by_domain[d] if t is not wrong_tool]
        rng.shuffle(pool)
        names = {t["name"] for t in chosen.values()} | ({wrong_tool["name"]} if wrong_tool else set())
        extra = [wrong_tool] if wrong_tool else []
        for t in pool:
            if len(extra) >= n:
                break
            if t["name"] not in names:
                names.add(t["name"])
                extra.append(t)
        offered = list(chosen.values()) + extra
        rng.shuffle(offered)
        return chosen, offered, wrong_tool

    # -- calls ---------------------------------------------------------------------------
    def _args(self, rng: random.Random, hop: Hop, tool: dict, top_k: bool = True) -> dict:
        """Arguments from the tool's schema (generators.tools.fill): the hop's query as the
        lookup and the entity name, every required argument filled; top_k at `top_k_rate`."""
        schema = schema_of(tool)
        args = fill_arguments(schema, hop.query, [hop.query], rng)
        k = schema.roles.k
        if top_k and rng.random() < self.top_k_rate and k:
            value = rng.choice(self.top_k_choices)
            if check_arguments(schema, {**args, k: value}) is None:
                args[k] = value
        return args

    def build(self, plan: Plan, triple: dict, evidence: Evidence | None = None, every_step: bool = True,
              phrased: bool = False, first_general: bool = False, states_facts: bool = False) -> Skeleton:
        """The skeleton of `plan`. Every slot that announces lookups carries what each one is (its
        tool's domain: "a place" tells the tool that finds it). With `evidence` and `every_step`
        (--reasoning evidence) the slots also carry what each page said, and the final slot every
        fact and the derivation; without `every_step` (brief) the final slot carries only the
        arithmetic of an answer computed from the facts, so that no think states a number that
        nothing before it gives. With `phrased` (--reasoning plan) and a world triple's phrases, the
        plan slot lists every lookup as the question names it, and every slot after a result the
        phrases of what it read (`was`) and of what comes next (`said`; the final slot `last`).
        With `phrased` the final slot of an answer that is not computed also carries the facts and
        the derivation: what the last pages say after such a plan (`last`), and the question asked
        of a single last page by its name (`asks`), else every fact. With `evidence` and
        `states_facts` (--reasoning facts) the slots are brief's but the final one, which carries
        every fact and the steps that decide the answer (`Evidence.decisive`), marked
        `form: "facts"`: its think states them in one or two sentences. With `first_general` the first
        round's lookups go to the general search and the first think gives them no kind: no page has
        said yet what those names are (a case that `names_first_round`, the escalation, keeps its
        domain tools: it shows one falling short)."""
        ev = evidence or Evidence()
        case = CASES[plan.case]
        d = Draft(self, plan, triple, ev, shows=evidence is not None and every_step)
        computed = plan.computed  # the calculator call, after the searches (d.rounds), if any
        unnamed = first_general and not case.names_first_round  # the first round's kinds are not known yet
        if unnamed:
            d.rounds = [[replace(h, domain=GENERAL) for h in d.rounds[0]], *d.rounds[1:]]
        d.unnamed = unnamed
        rounds = d.rounds
        hops = [h for r in rounds for h in r]
        needed = list(dict.fromkeys(h.domain for h in hops))
        if case.needs_general(rounds):
            needed = list(dict.fromkeys(needed + [GENERAL]))
        if computed:
            needed.append(COMPUTE)
        wrong = None
        if case.wrong_domain:
            wrong = d.rng.choice([x for x in self.domains if x not in needed and x != GENERAL and self.by_domain.get(x)])
        d.chosen, d.offered, d.wrong_tool = self._offer(d.rng, needed, wrong)
        d.target = case.target(d.rng, rounds)  # the hop where the case's error happens

        phrases = _phrases(triple, rounds) if phrased and len(rounds) > 1 else {}

        def local(q: str, i: int) -> str:
            """How the question names lookup `q`, with the names of the round i pages read before it in
            place of their phrases: "the capital of the country that contains Thelesk" after the page
            about "Gromora" (the country that contains Thelesk) is "the capital of Gromora"."""
            out = phrases[q]
            for x in sorted(d.queries(i), key=lambda x: -len(phrases[x])):
                out = out.replace(phrases[x], x)
            return out

        def said(i: int) -> dict:
            """How the question names the lookups of round i, which the think announces (`said`), and
            those of round i - 1, whose pages it just read (`was`; the first round's are its names),
            each by the pages read just before it."""
            if not phrases:
                return {}
            return {"said": [local(q, i - 1) for q in d.queries(i)],
                    "was": [local(q, i - 2) for q in d.queries(i - 1)] if i > 1 else []}

        # a computed answer's plan says at once that its arithmetic goes to the calculator at the end
        slot = Slot("plan", {"queries": d.queries(0), "kinds": d.kinds(0), **({"computes": True} if computed else {}),
                             **({"path": [[phrases[h.query] for h in r] for r in rounds[1:]]} if phrases else {})})
        ri = last = 0  # last: rounds read when the last round that the case did not cut short came back
        while ri < len(rounds):
            calls = []
            for j, hop in enumerate(rounds[ri]):
                call = case.call(d, ri, j, hop)
                if call is None:
                    tool = d.chosen[hop.domain]
                    call = d.call(j, tool, d.args(hop, tool), hop)
                calls.append(call)
            d.turns.append(Turn(calls, slot))
            bad = next((c for c in calls if c.injected_error), None)
            if bad is not None:
                case.repair(d, bad)
            case.after_round(d, calls)
            found = [c.hop.query for c in calls]
            step = case.next_slot(d, ri, found)
            if step is not None:
                slot, ri = step
            else:
                ri += 1
                last = ri
                slot = Slot("next", {"found": found, "queries": d.queries(ri), "kinds": d.kinds(ri), **said(ri),
                                     "read": d.read(rounds[ri - 1])})
            if computed and ri == len(rounds) - 1:  # it announces the last lookup: the calculator comes next
                slot.facts["computes"] = True
        turns = d.turns
        if computed:  # the arithmetic goes to the calculator, whose result the final think reads
            slot = Slot("compute", {**slot.facts, "expression": computed.query, "queries": [],
                                    "operands": _operands([computed.query])})
            tool = d.chosen[COMPUTE]
            call = Call(id=d.call_id(0), tool=tool, hop=computed, golden=[],
                        arguments={schema_of(tool).roles.lookup: computed.query})
            call.result = self.sim.call(tool["name"], call.arguments)
            turns.append(Turn([call], slot))
        ended = {"last": d.queries(last - 1), **said(last)} if phrases and last == len(rounds) and not computed else {}
        if ended and len(ended["last"]) == 1 and last > 1:  # what the question asks of the last page
            ended["asks"] = _asks(triple["question"], phrases[ended["last"][0]], ended["last"][0])
        if d.shows or (phrased and evidence is not None and not ev.computed):  # every fact and the derivation
            told = {"facts": ev.facts, "steps": ev.steps, "required": ev.required, "quoted": ev.quoted}
            if ended and ev.read:  # plan, at the end of its lookups: what the last pages say gives the answer
                facts = _read(ev, rounds[last - 1])
                told |= {"facts": facts, "required": [x for x in ev.required if any(x in fact for fact in facts)]
                         + [triple["answer"]]}
        elif states_facts and ev.facts:  # facts: every fact and what decides the answer, in the final think only
            told = {"facts": ev.facts, "steps": ev.decisive, "required": ev.required, "quoted": ev.quoted,
                    "form": "facts"}
        else:  # brief: only a computed answer's arithmetic
            told = {"steps": ev.steps, "required": _operands(ev.steps)} if ev.computed else {}
        final = Slot("final", {"found": list(dict.fromkeys(h.query for h in hops)), "answer": triple["answer"], **ended,
                               "skipped": d.skipped, "question": triple["question"], **told})
        answer = Slot("answer", {"answer": triple["answer"], "aliases": list(triple.get("aliases", []))})
        for turn, after in zip(turns, [t.slot for t in turns[1:]] + [final]):  # the think after a repeat names it
            again = [c.hop.query for c in turn.calls if c.injected_error == "repeated_call"]
            if again:
                after.facts["again"] = again
        sources = [triple["question"]]
        for turn in turns:
            turn.slot.sources = list(sources)
            sources += [c.result for c in turn.calls]
        final.sources = sources
        if computed:  # every think of a computed answer starts by saying so
            for sl in [t.slot for t in turns] + [final]:
                sl.facts["years"] = True
        correct = list(dict.fromkeys(c.tool["name"] for t in turns for c in t.calls if not c.injected_error))
        return Skeleton(plan, triple, d.offered, correct, turns, final, answer, self.seed,
                        [d.chosen[x]["name"] for x in needed])


class Draft:
    """A skeleton in the making, which `SkeletonBuilder.build` and the plan's reflection case
    (generators/synth/cases.py) act on: the rounds of lookups, the tools chosen per domain and
    offered, the case's target hop and wrong tool, the turns so far, and the draws (`rng`)."""

    def __init__(self, builder: SkeletonBuilder, plan: Plan, triple: dict, evidence: Evidence, shows: bool):
        self.builder, self.plan, self.ev, self.shows = builder, plan, evidence, shows
        salt = (plan.case,) if not plan.variant else (plan.case, plan.variant)  # a variant draws anew
        self.rng = _rng(builder.seed, plan.triple_id, *salt)
        self.sk_id = hashlib.sha256("|".join(map(str, (builder.seed, plan.triple_id, *salt))).encode()).hexdigest()
        self.rounds: list[list[Hop]] = plan.lookups  # searches (the calculator's round is not among them)
        self.unnamed = False
        self.turns: list[Turn] = []
        self.chosen: dict[str, dict] = {}
        self.offered: list[dict] = []
        self.wrong_tool: dict | None = None
        self.target: Hop | None = None
        self.skipped: str | None = None  # a lookup an early stop skipped
        supporting: dict[str, list[str]] = {}
        for f in triple.get("supporting_facts") or []:
            supporting.setdefault(f["doc_id"], []).append(f["sentence"])
        self.supporting = supporting
        self.answers: dict[str, list[str]] = {}
        for i, r in enumerate(self.rounds):
            for h in r:  # what a lookup must not leak when it fails: the next entity, or the answer
                self.answers[h.doc_id] = ([x.query for x in self.rounds[i + 1]] if i + 1 < len(self.rounds)
                                          else [triple["answer"], *triple.get("aliases", [])])

    def queries(self, i: int) -> list[str]:
        return [h.query for h in self.rounds[i]] if i < len(self.rounds) else []

    def kinds(self, i: int) -> list[str]:
        """What each lookup of round i is, as the tool domains say (nothing for an unnamed first round)."""
        return [h.domain for h in self.rounds[i]] if i < len(self.rounds) and not (self.unnamed and i == 0) else []

    def read(self, hops: list[Hop]) -> list[str]:
        """What the pages of `hops` state, when the slots show it (--reasoning evidence)."""
        return _read(self.ev, hops) if self.shows else []

    def call_id(self, j: int) -> str:
        return f"call_{self.sk_id[:8]}_{len(self.turns)}_{j}"

    def call(self, j: int, tool: dict, args: dict, hop: Hop, mode: str = "good", golden: list[str] | None = None,
             injected: str | None = None) -> Call:
        """Call j of the next turn, answered by the simulator."""
        c = Call(id=self.call_id(j), tool=tool, arguments=args, hop=hop, mode=mode,
                 golden=golden if golden is not None else [hop.doc_id],
                 supporting=self.supporting.get(hop.doc_id, []), answers=self.answers[hop.doc_id],
                 injected_error=injected)
        c.result = self.builder.sim.call(tool["name"], c.arguments, golden_doc_ids=c.golden, mode=c.mode,
                                         supporting=c.supporting, answers=c.answers)
        c.retrieved = self.builder.sim.retrieved(SimCall(tool["name"], c.arguments, c.golden, c.mode))
        return c

    def args(self, hop: Hop, tool: dict, top_k: bool = True) -> dict:
        return self.builder._args(self.rng, hop, tool, top_k)

    def slot(self, kind: str, facts: dict) -> Slot:
        return Slot(kind, facts)

    def add(self, slot: Slot, call: Call) -> None:
        """A turn of one call after the think of `slot`."""
        self.turns.append(Turn([call], slot))

    def taken_names(self) -> set[str]:
        """The names of every tool the simulator knows and every tool offered."""
        return set(self.builder.sim.tools) | {o["name"] for o in self.offered}

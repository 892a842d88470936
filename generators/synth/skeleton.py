"""Trajectory skeletons: every tool call, argument, injected error and tool result, built by
the program from a plan, the tool bank and the simulator. Only the reasoning (`<think>`)
and the final answer wording are left as slots for the LLM.

Cases (the error is injected at one hop, chosen per triple):
  clean        every call is right the first time
  wrong_args   the right tool with schema-breaking arguments; the next turn fixes them
  wrong_tool   a tool of another domain (results miss the golden page); the next turn switches
  escalation   wrong tool -> right tool with wrong arguments -> right tool, result
               insufficient -> the general search, which finds it
  early_stop   two lookups planned; the first result already holds both pages, so the
               second lookup is skipped
  repeat       a lookup made again with the same arguments, after the same think word for
               word (as greedy decoding writes it when it loops); the same page comes back,
               and the next think says it is the page already read before it goes on with
               the plan. The repeated call is flagged `repeated_call`: SFT keeps its turn as
               context only
  unknown_tool a later lookup of a known kind calls a tool that is not offered, named after
               the kind of its page as a model makes one up ("search_film"); the simulator
               answers `unknown_tool`, and the next turn makes the lookup with the general
               search. The invented call is flagged `unknown_tool`: SFT keeps its turn as
               context only (train/configs.py `context_errors`)

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
import itertools
import json
import random
import re
from dataclasses import dataclass, field, replace

from generators.synth.evidence import Evidence
from generators.synth.plan import Hop, Plan
from generators.tools.arguments import corrupt_arguments
from generators.tools.base import DOMAINS, GENERAL, parameters_of
from generators.tools.compute import COMPUTE
from generators.tools.fill import check_arguments, fill_arguments, roles_of
from generators.tools.sim_call import SimCall
from storage.schema import meta_of


@dataclass
class Call:
    id: str
    tool: dict  # the offered tool row
    arguments: dict
    hop: Hop
    mode: str = "good"
    golden: list[str] = field(default_factory=list)
    supporting: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    injected_error: str | None = None
    result: str = ""
    retrieved: str | None = None  # a hash of the retriever's results for the call (not with bm25)

    def replay_key(self) -> dict:
        key = {"tool": self.tool["name"], "mode": self.mode, "golden_doc_ids": self.golden,
               "supporting": self.supporting, "answers": self.answers}
        if self.retrieved is not None:
            key["retrieved"] = self.retrieved
        return key


@dataclass
class Slot:
    """A piece of text the LLM writes: `kind` says what the reasoning must cover."""

    kind: str  # plan | next | fix_args | switch_tool | escalate | no_tool | early_stop | compute | final | answer
    facts: dict  # with "again" (the repeat case): the lookups the turn before made a second time (set by `build`)
    sources: list[str] | None = None  # question + earlier tool results (None: not recorded)


@dataclass
class Turn:
    calls: list[Call]
    slot: Slot


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


# Tools a model makes up after the kind of page it wants (the unknown_tool case), by domain; each
# becomes "search_<word>" unless a tool of the bank has that name.
INVENTED = {"person": ("artist", "author", "director", "people"), "place": ("city", "country", "town"),
            "organisation": ("company", "studio", "university"), "work": ("film", "book", "album", "song"),
            "event": ("battle", "treaty", "festival"), "science": ("concept", "theory")}


def _invented(rng: random.Random, domain: str, taken) -> str:
    """A tool name a model could make up for a page of `domain`, which no tool in `taken` has."""
    free = [n for n in [*(f"search_{w}" for w in INVENTED.get(domain, ())), f"search_{domain}_pages"] if n not in taken]
    return rng.choice(free) if free else next(n for i in itertools.count() if (n := f"search_{domain}_{i}") not in taken)


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

    # -- tools -------------------------------------------------------------------------
    def _offer(self, rng: random.Random, needed: list[str], wrong: str | None) -> tuple[dict[str, dict], list[dict], dict | None]:
        chosen = {d: rng.choice(self.by_domain[d]) for d in needed}
        others = [d for d in (*DOMAINS, COMPUTE) if d not in needed and self.by_domain.get(d)]
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
    def _call(self, sk_id: str, turn: int, j: int, tool: dict, args: dict, hop: Hop, ctx: dict,
              mode: str = "good", golden: list[str] | None = None, injected: str | None = None) -> Call:
        c = Call(id=f"call_{sk_id[:8]}_{turn}_{j}", tool=tool, arguments=args, hop=hop, mode=mode,
                 golden=golden if golden is not None else [hop.doc_id],
                 supporting=ctx["supporting"].get(hop.doc_id, []), answers=ctx["answers"][hop.doc_id],
                 injected_error=injected)
        c.result = self.sim.call(tool["name"], c.arguments, golden_doc_ids=c.golden, mode=c.mode,
                                 supporting=c.supporting, answers=c.answers)
        c.retrieved = self.sim.retrieved(SimCall(tool["name"], c.arguments, c.golden, c.mode))
        return c

    def _args(self, rng: random.Random, hop: Hop, tool: dict, top_k: bool = True) -> dict:
        """Arguments from the tool's schema (generators.tools.fill): the hop's query as the
        lookup and the entity name, every required argument filled; top_k at `top_k_rate`."""
        params = parameters_of(tool)
        args = fill_arguments(params, hop.query, [hop.query], rng)
        k = roles_of(params).k
        if top_k and rng.random() < self.top_k_rate and k:
            value = rng.choice(self.top_k_choices)
            if check_arguments(params, {**args, k: value}) is None:
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
        said yet what those names are (an escalation keeps its domain tools: it shows one falling
        short)."""
        ev = evidence or Evidence()
        shows = evidence is not None and every_step
        salt = (plan.case,) if not plan.variant else (plan.case, plan.variant)  # a variant draws anew
        rng = _rng(self.seed, plan.triple_id, *salt)
        rounds, computed = plan.lookups, plan.computed  # searches, then the calculator call if any
        unnamed = first_general and plan.case != "escalation"  # the first round's kinds are not known yet
        if unnamed:
            rounds = [[replace(h, domain=GENERAL) for h in rounds[0]], *rounds[1:]]
        hops = [h for r in rounds for h in r]
        needed = list(dict.fromkeys(h.domain for h in hops))
        if plan.case in ("escalation", "unknown_tool") or \
                (plan.case == "early_stop" and rounds[0][0].domain != rounds[1][0].domain):
            needed = list(dict.fromkeys(needed + [GENERAL]))
        if computed:
            needed.append(COMPUTE)
        wrong = None
        if plan.case in ("wrong_tool", "escalation"):
            wrong = rng.choice([d for d in DOMAINS if d not in needed and d != GENERAL and self.by_domain.get(d)])
        chosen, offered, wrong_tool = self._offer(rng, needed, wrong)
        # the hop where the case's error happens
        if plan.case == "escalation":
            target = rng.choice([h for h in hops if h.domain != GENERAL])
        elif plan.case == "unknown_tool":  # after a page has said what the next lookup is
            target = rng.choice([h for r in rounds[1:] for h in r if h.domain != GENERAL])
        else:
            target = rng.choice(rounds[rng.randrange(len(rounds))])

        supporting: dict[str, list[str]] = {}
        for f in triple.get("supporting_facts") or []:
            supporting.setdefault(f["doc_id"], []).append(f["sentence"])
        answers: dict[str, list[str]] = {}
        for i, r in enumerate(rounds):
            for h in r:  # what a lookup must not leak when it fails: the next entity, or the answer
                answers[h.doc_id] = ([x.query for x in rounds[i + 1]] if i + 1 < len(rounds)
                                     else [triple["answer"], *triple.get("aliases", [])])
        ctx = {"supporting": supporting, "answers": answers}
        sk_id = hashlib.sha256("|".join(map(str, (self.seed, plan.triple_id, *salt))).encode()).hexdigest()

        def queries(i: int) -> list[str]:
            return [h.query for h in rounds[i]] if i < len(rounds) else []

        def kinds(i: int) -> list[str]:  # what each lookup of round i is, as the tool domains say
            return [h.domain for h in rounds[i]] if i < len(rounds) and not (unnamed and i == 0) else []

        phrases = _phrases(triple, rounds) if phrased and len(rounds) > 1 else {}

        def local(q: str, i: int) -> str:
            """How the question names lookup `q`, with the names of the round i pages read before it in
            place of their phrases: "the capital of the country that contains Thelesk" after the page
            about "Gromora" (the country that contains Thelesk) is "the capital of Gromora"."""
            out = phrases[q]
            for x in sorted(queries(i), key=lambda x: -len(phrases[x])):
                out = out.replace(phrases[x], x)
            return out

        def said(i: int) -> dict:
            """How the question names the lookups of round i, which the think announces (`said`), and
            those of round i - 1, whose pages it just read (`was`; the first round's are its names),
            each by the pages read just before it."""
            if not phrases:
                return {}
            return {"said": [local(q, i - 1) for q in queries(i)],
                    "was": [local(q, i - 2) for q in queries(i - 1)] if i > 1 else []}

        turns: list[Turn] = []
        # a computed answer's plan says at once that its arithmetic goes to the calculator at the end
        slot = Slot("plan", {"queries": queries(0), "kinds": kinds(0), **({"computes": True} if computed else {}),
                             **({"path": [[phrases[h.query] for h in r] for r in rounds[1:]]} if phrases else {})})
        skipped = None
        ri = last = 0  # last: rounds read when the last round that was not an early stop came back
        while ri < len(rounds):
            t, calls = len(turns), []
            for j, hop in enumerate(rounds[ri]):
                tool = chosen[hop.domain]
                if plan.case == "early_stop" and ri == 0:
                    nxt = rounds[1][0]
                    both = tool if nxt.domain == hop.domain else chosen[GENERAL]
                    calls.append(self._call(sk_id, t, j, both, self._args(rng, hop, both), hop, ctx,
                                            golden=[hop.doc_id, nxt.doc_id]))
                elif hop is target and plan.case == "wrong_args":
                    bad, kind = corrupt_arguments(tool, self._args(rng, hop, tool), None, rng)
                    calls.append(self._call(sk_id, t, j, tool, bad, hop, ctx, injected=f"wrong_args:{kind}"))
                elif hop is target and plan.case == "unknown_tool":
                    made_up = {"name": _invented(rng, hop.domain, set(self.sim.tools) | {o["name"] for o in offered})}
                    calls.append(self._call(sk_id, t, j, made_up, {"query": hop.query}, hop, ctx, mode="bad",
                                            injected="unknown_tool"))
                elif hop is target and plan.case in ("wrong_tool", "escalation"):
                    calls.append(self._call(sk_id, t, j, wrong_tool, self._args(rng, hop, wrong_tool, False), hop, ctx,
                                            mode="bad", injected="wrong_tool"))
                else:
                    calls.append(self._call(sk_id, t, j, tool, self._args(rng, hop, tool), hop, ctx))
            turns.append(Turn(calls, slot))
            self._repairs(turns, rng, plan, chosen, ctx)
            if plan.case == "repeat":
                self._repeat(turns, calls, target, sk_id)
            found = [c.hop.query for c in calls]
            if plan.case == "early_stop" and ri == 0:
                skipped, ri = rounds[1][0].query, 2
                slot = Slot("early_stop", {"found": found + [skipped], "skipped": skipped, "queries": queries(ri),
                                           "kinds": kinds(ri),
                                           "read": _read(ev, rounds[0] + rounds[1]) if shows else []})
            else:
                ri += 1
                last = ri
                slot = Slot("next", {"found": found, "queries": queries(ri), "kinds": kinds(ri), **said(ri),
                                     "read": _read(ev, rounds[ri - 1]) if shows else []})
            if computed and ri == len(rounds) - 1:  # it announces the last lookup: the calculator comes next
                slot.facts["computes"] = True
        if computed:  # the arithmetic goes to the calculator, whose result the final think reads
            slot = Slot("compute", {**slot.facts, "expression": computed.query, "queries": [],
                                    "operands": _operands([computed.query])})
            tool = chosen[COMPUTE]
            call = Call(id=f"call_{sk_id[:8]}_{len(turns)}_0", tool=tool, hop=computed, golden=[],
                        arguments={roles_of(parameters_of(tool)).lookup: computed.query})
            call.result = self.sim.call(tool["name"], call.arguments)
            turns.append(Turn([call], slot))
        ended = {"last": queries(last - 1), **said(last)} if phrases and last == len(rounds) and not computed else {}
        if ended and len(ended["last"]) == 1 and last > 1:  # what the question asks of the last page
            ended["asks"] = _asks(triple["question"], phrases[ended["last"][0]], ended["last"][0])
        if shows or (phrased and evidence is not None and not ev.computed):  # every fact and the derivation
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
                               "skipped": skipped, "question": triple["question"], **told})
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
        return Skeleton(plan, triple, offered, correct, turns, final, answer, self.seed,
                        [chosen[d]["name"] for d in needed])

    def _repeat(self, turns: list[Turn], calls: list[Call], target: Hop, sk_id: str) -> None:
        """The repeat case: when the round just made holds the target lookup, the same turn again
        (the same think, the same call) with the same result."""
        first = next((c for c in calls if c.hop is target), None)
        if first is not None:
            c = replace(first, id=f"call_{sk_id[:8]}_{len(turns)}_0", injected_error="repeated_call")
            turns.append(Turn([c], replace(turns[-1].slot, facts=dict(turns[-1].slot.facts))))

    def _repairs(self, turns: list[Turn], rng: random.Random, plan: Plan, chosen: dict, ctx: dict) -> None:
        """After a turn with an injected error, append the turns that repair it."""
        bad = next((c for c in turns[-1].calls if c.injected_error), None)
        if bad is None:
            return
        sk_id = bad.id.split("_")[1]
        hop, tool = bad.hop, chosen[bad.hop.domain]

        def add(slot: Slot, args: dict, use: dict | None = None, **kw) -> Call:
            call = self._call(sk_id, len(turns), 0, use or tool, args, hop, ctx, **kw)
            turns.append(Turn([call], slot))
            return call

        def detail(call: Call) -> str:
            return json.loads(call.result).get("detail", "")

        if bad.injected_error == "unknown_tool":
            add(Slot("no_tool", {"tool": bad.tool["name"], "general": chosen[GENERAL]["name"], "query": hop.query}),
                self._args(rng, hop, chosen[GENERAL]), use=chosen[GENERAL])
            return
        if bad.injected_error.startswith("wrong_args"):
            add(Slot("fix_args", {"tool": tool["name"], "error": detail(bad), "query": hop.query}),
                self._args(rng, hop, tool))
            return
        switch = Slot("switch_tool", {"wrong_tool": bad.tool["name"], "tool": tool["name"], "query": hop.query})
        if plan.case == "wrong_tool":
            add(switch, self._args(rng, hop, tool))
            return
        # escalation: right tool with wrong arguments, then an insufficient result, then general search
        wrong_args, kind = corrupt_arguments(tool, self._args(rng, hop, tool), None, rng)
        failed = add(switch, wrong_args, injected=f"wrong_args:{kind}")
        add(Slot("fix_args", {"tool": tool["name"], "error": detail(failed), "query": hop.query}),
            self._args(rng, hop, tool), mode="insufficient")
        add(Slot("escalate", {"tool": tool["name"], "general": chosen[GENERAL]["name"], "query": hop.query}),
            self._args(rng, hop, chosen[GENERAL]), use=chosen[GENERAL])

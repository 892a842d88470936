"""Reflection cases: the kinds of trajectory a plan can take, each declared in one place.

A case is one `Case` and one entry in `CASES`: which plans it fits (`allows`), what the skeleton
does at the hop where its error happens (`call`) and the turns that repair it (`repair`), and the
texts of the slots it adds (`slots`: what the prompt asks the think to say, the program's own
think, the words a model's think must mention). generators/synth/skeleton.py runs the cases
through one loop (its `Draft` is the skeleton in the making that a case acts on:
`d.call`, `d.args`, `d.add`, `d.slot`); generators/synth/think.py writes every slot kind from
the texts here or its own (plan, next, compute, final, answer).

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

The error is injected at one hop (`target`, drawn per triple); an error never hits the
calculator. The order of `CASES` is the order a case mix is read in (generators/synth/plan.py
`choose_case`), so a new case goes at the end: the cases of existing seeds stay as they were.

    CASES["wrong_args"].allows(plan.lookups)      # True
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass, replace
from typing import Callable

from generators.tools.arguments import corrupt_arguments
from generators.tools.base import GENERAL
from generators.synth.wording import clip, page_says, quoted, reads, then_compute, with_kinds


@dataclass(frozen=True)
class SlotText:
    """The texts of one slot kind: what the prompt asks the think to say (`describe`), the
    program's own think when a model's is unusable (`template`; None: `describe` with "Next
    step:" turned into "So I will"), and the words a think must mention one of (`terms`)."""

    kind: str
    describe: Callable[[dict], str]
    terms: Callable[[dict], list[str]]
    template: Callable[[dict], str] | None = None


def _tool_terms(f: dict) -> list[str]:
    return [f["query"], f.get("tool", ""), f.get("general", "")]


FIX_ARGS = SlotText(
    "fix_args",
    lambda f: (f"The call to {f['tool']} failed because its arguments were invalid ({clip(f['error'], 120)}). "
               f"Next step: call {f['tool']} again with a proper query for \"{f['query']}\"."),
    _tool_terms)
SWITCH_TOOL = SlotText(
    "switch_tool",
    lambda f: (f"The tool {f['wrong_tool']} searches the wrong kind of pages and did not find \"{f['query']}\". "
               f"Next step: use {f['tool']} instead."),
    _tool_terms)
ESCALATE = SlotText(
    "escalate",
    lambda f: (f"{f['tool']} returned pages that do not contain the needed fact about \"{f['query']}\". "
               f"Next step: try the general search {f['general']}."),
    _tool_terms)
NO_TOOL = SlotText(
    "no_tool",
    lambda f: (f"There is no tool named {f['tool']}, so the call failed. "
               f"Next step: search for \"{f['query']}\" with the general search {f['general']}, "
               f"which finds pages of any kind."),
    _tool_terms,
    lambda f: (f"There is no tool named {f['tool']}. The general search {f['general']} finds pages of any kind, "
               f"so now I will search for \"{f['query']}\" with it."))


def _early_stop_describe(f: dict) -> str:
    rest = f" Next step: look up {quoted(f['queries'])}{then_compute(f)}." if f["queries"] else ""
    said = f" It says: {reads(f)}" if f.get("read") else ""
    return (f"I had planned to look up \"{f['skipped']}\" next, but the last result already contains that "
            f"page, so that search is not needed.{said}{rest}")


def _early_stop_template(f: dict) -> str:
    if not f.get("read"):
        return _early_stop_describe(f).replace("Next step: ", "So I will ")
    rest = f" Now I need to look up {with_kinds(f['queries'], f.get('kinds'))}{then_compute(f)}." if f["queries"] else ""
    return (f"The result already has the page about \"{f['skipped']}\" too. {page_says([f['skipped']], f['read'])}, "
            f"so I do not need to search for \"{f['skipped']}\".{rest}")


EARLY_STOP = SlotText("early_stop", _early_stop_describe, lambda f: [f["skipped"], *f.get("queries", [])],
                      _early_stop_template)


class Case:
    """A reflection case; the defaults are the clean case's (no error, no slot of its own)."""

    name = ""
    slots: tuple[SlotText, ...] = ()
    wrong_domain = False  # it calls a tool of another domain, drawn before the tools are offered
    names_first_round = False  # with a general first search it keeps its domain tools (it shows one falling short)

    def allows(self, rounds: list[list]) -> bool:
        """Whether a plan of these lookup rounds (no calculator round) can take this case."""
        return True

    def needs_general(self, rounds: list[list]) -> bool:
        """Whether the general search must be offered besides the plan's own tools."""
        return False

    def target(self, rng: random.Random, rounds: list[list]):
        """The hop where the error happens."""
        return rng.choice(rounds[rng.randrange(len(rounds))])

    def call(self, d, ri: int, j: int, hop):
        """This case's call for lookup j of round ri, or None for the plain one."""
        return None

    def repair(self, d, bad) -> None:
        """Append the turns that repair the injected error of call `bad`."""

    def after_round(self, d, calls: list) -> None:
        """Anything the case does after a round's turn (and its repairs)."""

    def next_slot(self, d, ri: int, found: list[str]):
        """(the slot of the turn after round ri, the next round) where the case decides them, else None."""
        return None

    def opening(self, facts: dict) -> str:
        """Words a think of a slot starts with in this case ('' for none)."""
        return ""


class Clean(Case):
    name = "clean"


class WrongArgs(Case):
    name = "wrong_args"
    slots = (FIX_ARGS,)

    def call(self, d, ri, j, hop):
        if hop is d.target:
            tool = d.chosen[hop.domain]
            bad, kind = corrupt_arguments(tool, d.args(hop, tool), None, d.rng)
            return d.call(j, tool, bad, hop, injected=f"wrong_args:{kind}")

    def repair(self, d, bad):
        tool = d.chosen[bad.hop.domain]
        d.add(d.slot("fix_args", {"tool": tool["name"], "error": _detail(bad), "query": bad.hop.query}),
              d.call(0, tool, d.args(bad.hop, tool), bad.hop))


class WrongTool(Case):
    name = "wrong_tool"
    slots = (SWITCH_TOOL,)
    wrong_domain = True

    def call(self, d, ri, j, hop):
        if hop is d.target:
            return d.call(j, d.wrong_tool, d.args(hop, d.wrong_tool, False), hop, mode="bad", injected="wrong_tool")

    def switch(self, d, bad):
        tool = d.chosen[bad.hop.domain]
        return d.slot("switch_tool", {"wrong_tool": bad.tool["name"], "tool": tool["name"], "query": bad.hop.query})

    def repair(self, d, bad):
        tool = d.chosen[bad.hop.domain]
        d.add(self.switch(d, bad), d.call(0, tool, d.args(bad.hop, tool), bad.hop))


class Escalation(WrongTool):
    name = "escalation"
    slots = (SWITCH_TOOL, FIX_ARGS, ESCALATE)
    names_first_round = True

    def allows(self, rounds):
        return any(h.domain != GENERAL for r in rounds for h in r)  # a specialised tool that can fall short

    def needs_general(self, rounds):
        return True

    def target(self, rng, rounds):
        return rng.choice([h for r in rounds for h in r if h.domain != GENERAL])

    def repair(self, d, bad):
        """Right tool with wrong arguments, then an insufficient result, then the general search."""
        hop, tool = bad.hop, d.chosen[bad.hop.domain]
        wrong_args, kind = corrupt_arguments(tool, d.args(hop, tool), None, d.rng)
        failed = d.call(0, tool, wrong_args, hop, injected=f"wrong_args:{kind}")
        d.add(self.switch(d, bad), failed)
        d.add(d.slot("fix_args", {"tool": tool["name"], "error": _detail(failed), "query": hop.query}),
              d.call(0, tool, d.args(hop, tool), hop, mode="insufficient"))
        general = d.chosen[GENERAL]
        d.add(d.slot("escalate", {"tool": tool["name"], "general": general["name"], "query": hop.query}),
              d.call(0, general, d.args(hop, general), hop))


class EarlyStop(Case):
    name = "early_stop"
    slots = (EARLY_STOP,)

    def allows(self, rounds):
        return len(rounds) >= 2 and len(rounds[0]) == 1 and len(rounds[1]) == 1  # the first result holds both

    def needs_general(self, rounds):
        return rounds[0][0].domain != rounds[1][0].domain  # one search must find pages of both kinds

    def call(self, d, ri, j, hop):
        if ri == 0:
            nxt = d.rounds[1][0]
            both = d.chosen[hop.domain] if nxt.domain == hop.domain else d.chosen[GENERAL]
            return d.call(j, both, d.args(hop, both), hop, golden=[hop.doc_id, nxt.doc_id])

    def next_slot(self, d, ri, found):
        if ri != 0:
            return None
        d.skipped = skipped = d.rounds[1][0].query
        return d.slot("early_stop", {"found": found + [skipped], "skipped": skipped, "queries": d.queries(2),
                                     "kinds": d.kinds(2), "read": d.read(d.rounds[0] + d.rounds[1])}), 2


class Repeat(Case):
    name = "repeat"

    def after_round(self, d, calls):
        """When the round just made holds the target lookup, the same turn again (the same think,
        the same call) with the same result."""
        first = next((c for c in calls if c.hop is d.target), None)
        if first is not None:
            again = replace(first, id=d.call_id(0), injected_error="repeated_call")
            last = d.turns[-1].slot
            d.add(replace(last, facts=dict(last.facts)), again)

    def opening(self, facts):
        """'This is the same page about "B" as before, so I will not search for it again. ': the first
        words of the think after a repeated lookup."""
        if not facts.get("again"):
            return ""
        many = len(facts["again"]) > 1
        return (f"This is the same {'pages' if many else 'page'} about {quoted(facts['again'])} as before, so I will "
                f"not search for {'them' if many else 'it'} again. ")


# Tools a model makes up after the kind of page it wants (the unknown_tool case), by domain; each
# becomes "search_<word>" unless a tool of the bank has that name.
INVENTED = {"person": ("artist", "author", "director", "people"), "place": ("city", "country", "town"),
            "organisation": ("company", "studio", "university"), "work": ("film", "book", "album", "song"),
            "event": ("battle", "treaty", "festival"), "science": ("concept", "theory")}


def invented(rng: random.Random, domain: str, taken) -> str:
    """A tool name a model could make up for a page of `domain`, which no tool in `taken` has."""
    free = [n for n in [*(f"search_{w}" for w in INVENTED.get(domain, ())), f"search_{domain}_pages"] if n not in taken]
    return rng.choice(free) if free else next(n for i in itertools.count() if (n := f"search_{domain}_{i}") not in taken)


class UnknownTool(Case):
    name = "unknown_tool"
    slots = (NO_TOOL,)

    def allows(self, rounds):
        return any(h.domain != GENERAL for r in rounds[1:] for h in r)  # a later lookup of a known kind

    def needs_general(self, rounds):
        return True

    def target(self, rng, rounds):  # after a page has said what the next lookup is
        return rng.choice([h for r in rounds[1:] for h in r if h.domain != GENERAL])

    def call(self, d, ri, j, hop):
        if hop is d.target:
            made_up = {"name": invented(d.rng, hop.domain, d.taken_names())}
            return d.call(j, made_up, {"query": hop.query}, hop, mode="bad", injected="unknown_tool")

    def repair(self, d, bad):
        general = d.chosen[GENERAL]
        d.add(d.slot("no_tool", {"tool": bad.tool["name"], "general": general["name"], "query": bad.hop.query}),
              d.call(0, general, d.args(bad.hop, general), bad.hop))


def _detail(call) -> str:
    return json.loads(call.result).get("detail", "")


CASES: dict[str, Case] = {c.name: c for c in (Clean(), WrongArgs(), WrongTool(), Escalation(), EarlyStop(), Repeat(),
                                              UnknownTool())}


def slot_texts() -> dict[str, SlotText]:
    """The slot kinds the cases add, by kind."""
    return {t.kind: t for c in CASES.values() for t in c.slots}


def opening(facts: dict) -> str:
    """What a think starts with, as the cases say (the repeat case's 'This is the same page ...')."""
    return "".join(c.opening(facts) for c in CASES.values())

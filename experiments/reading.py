"""What a model did in an evaluation, counted from its rollouts' conversations (the
`messages` of train.evaluate's rollouts, as experiments/sft_tool_use.py saves them):

- `searches`: where each search went: the page its query names was returned, or the tool
  cannot see that page (wrong domain), or saw it but ranked another first, or no page has
  that name;
- `kinds`: whether the kind a think gives a lookup ('look up "Gaiwick", a place') is the
  kind of the page of that name, which names the domain tool that can see it, and whether the
  call of that turn for that name took the tool of that kind;
- `chains`: per question type, how many rollouts found every page the question needs, how
  many searched on after they had (a lookup past the last page), how many answered before
  they had, how many first thinks planned the calculator (only an answer computed from two
  dates takes it: the arithmetic questions) and how many opened as a computed answer's thinks
  do ("The question asks for ...", which other questions copy).

    sim = Simulator(documents, seed=0, tools=tools)
    searches([r.messages for r in rolls], sim)  # {"searches": 120, "found the page it named": 89, ...}
"""

from __future__ import annotations

import json
import re
from collections import Counter

from generators.llm.toolcalls import parse_tool_calls, split_think
from generators.synth.think import ASKS
from generators.synth.wording import KIND
from generators.tools.base import GENERAL, parameters_of
from generators.tools.compute import NAME as CALCULATOR
from generators.tools.fill import roles_of

# the kinds as the thinks say them, one ("a place") and many ("both places"), to their domain
DOMAIN_OF_WORD = {one: domain for domain, (one, _) in KIND.items() if domain != GENERAL}
MANY = {many: domain for domain, (_, many) in KIND.items() if domain != GENERAL}
_ONE = re.compile(r'"([^"]+)",? \(?(' + "|".join(DOMAIN_OF_WORD) + r")\b")
_ALL = re.compile(r'((?:"[^"]+"(?:, | and ))+"[^"]+"), (?:both|all) (' + "|".join(MANY) + r")\b")


def announced(think: str) -> list[tuple[str, str]]:
    """(name, kind) of every lookup a think announces with its kind, in the forms the thinks
    use: '"A", a place', '"A" (a person) and "B" (a place)', '"A" and "B", both places'."""
    out = [(name, DOMAIN_OF_WORD[said]) for name, said in _ONE.findall(think)]
    for names, said in _ALL.findall(think):
        out += [(name, MANY[said]) for name in re.findall(r'"([^"]+)"', names)]
    return out


def calls(messages: list[dict]) -> list[tuple[dict, dict]]:
    """Every parsed tool call of a conversation with the tool message that answered it (a
    rollout appends one tool message per parsed call, in order, after the assistant turn)."""
    out = []
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        answers = []
        for later in messages[i + 1:]:
            if later.get("role") != "tool":
                break
            answers.append(later)
        out += list(zip(parse_tool_calls(m.get("content") or "").calls, answers))
    return out


def _key(name: str) -> str:
    """A name as titles are matched: case and outer spaces ignored."""
    return name.strip().lower()


def _pages(sim):
    """The simulator's document index by title (`_key`), as a lookup of a name: None when no
    page has it."""
    by_title = {_key(t): i for i, t in enumerate(sim.titles)}
    return lambda name: by_title.get(_key(name)) if isinstance(name, str) else None


def _search(call: dict, sim) -> tuple[str, object] | None:
    """(domain of its tool, the name it looks up) of a search call; None for the calculator
    or a tool the simulator does not have."""
    tool = sim.tools.get(call["name"])
    if tool is None or tool[0] not in sim.masks:
        return None
    return tool[0], (call.get("arguments") or {}).get(roles_of(parameters_of(tool[1])).lookup)


def searches(conversations: list[list[dict]], sim) -> Counter:
    """Search calls (the calculator and unknown tools left out) by what came back for the page
    their query names."""
    out, page_of = Counter(), _pages(sim)
    for messages in conversations:
        for call, answer in calls(messages):
            search = _search(call, sim)
            if search is None:
                continue
            out["searches"] += 1
            domain, query = search
            page = page_of(query)
            try:
                got = {r["doc_id"] for r in json.loads(answer["content"]).get("results", [])}
            except (ValueError, TypeError, AttributeError):  # not a search result
                got = set()
            if page is None:
                out["its query is no page's title"] += 1
            elif sim.doc_ids[page] in got:
                out["found the page it named"] += 1
            elif not sim.masks[domain][page]:
                out["its tool cannot see the page"] += 1
            else:
                out["the page was not ranked first"] += 1
    return out


def _tools_for(content: str, sim) -> dict[str, set[str]]:
    """The domains of the tools a turn's calls took, by the name each call looks up."""
    out: dict[str, set[str]] = {}
    for domain, query in filter(None, (_search(call, sim) for call in parse_tool_calls(content).calls)):
        if isinstance(query, str):
            out.setdefault(_key(query), set()).add(domain)
    return out


def kinds(conversations: list[list[dict]], sim) -> Counter:
    """Lookups announced in the model's thinks with a kind, by whether the kind is the one of
    the page of that name (its domain tool's), and, where the same turn calls a search for
    that name, whether the call took the tool of the kind the think gave."""
    out, page_of = Counter(), _pages(sim)
    for messages in conversations:
        for m in messages:
            if m.get("role") != "assistant":
                continue
            content = m.get("content") or ""
            took = _tools_for(content, sim)
            for name, kind in announced(split_think(content).think or ""):
                tools = took.get(_key(name))
                if tools:
                    out["its call took the tool of that kind" if kind in tools else "its call took another tool"] += 1
                out["announced with a kind"] += 1
                page = page_of(name)
                if page is None:
                    out["no page has that name"] += 1
                elif sim.domain_of(sim.doc_ids[page]) == kind:
                    out["the right kind"] += 1
                else:
                    out["the wrong kind"] += 1
    return out


def chains(triples: list[dict], conversations: list[list[dict]], finishes: list[str]) -> dict[str, Counter]:
    """Per question type: rollouts, those whose tool results held every golden page, those
    that searched again after they did (a call to any tool but the calculator), those that
    answered, those that answered before holding every golden page, those whose first think
    names the calculator and those whose first think opens as a computed answer's thinks do
    (`finishes` are the rollouts' `stats["finish"]`, all three lists in the same order)."""
    out: dict[str, Counter] = {}
    for t, messages, finish in zip(triples, conversations, finishes, strict=True):
        seen = " ".join(m.get("content") or "" for m in messages if m.get("role") == "tool")
        every = all(d in seen for d in t["golden_doc_ids"])
        row = out.setdefault(t.get("qtype") or "other", Counter())
        row["rollouts"] += 1
        row["found every needed page"] += every
        row["searched on after finding every needed page"] += _searched_on(messages, t["golden_doc_ids"])
        row["answered"] += finish == "answer"
        row["answered before finding every needed page"] += finish == "answer" and not every
        first = next((m.get("content") for m in messages if m.get("role") == "assistant"), "")
        think = split_think(first).think or ""
        row["first think plans the calculator"] += "calculator" in think
        row["first think opens as a computed answer's"] += think.startswith(ASKS)
    return dict(sorted(out.items()))


def _searched_on(messages: list[dict], golden: list[str]) -> bool:
    """Whether a turn after the tool results held every golden page called a search (any tool
    but the calculator, which a computed answer calls after its last page)."""
    seen, complete = "", False
    for m in messages:
        if m.get("role") == "tool":
            seen += m.get("content") or ""
        elif m.get("role") == "assistant":
            complete = complete or all(d in seen for d in golden)
            if complete and any(c["name"] != CALCULATOR for c in parse_tool_calls(m.get("content") or "").calls):
                return True
    return False

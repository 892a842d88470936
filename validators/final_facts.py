"""Rules-layer step `final_facts`: the final `<think>` of a compared, computed or multi-hop
answer states a fact the answer follows from, not only which pages were read.

Which answers it applies to is decided from the record itself (its messages, its answer and
the question kind its `meta` records, `qtype` and `hop_count`, as synthesis writes them):

  compared   the answer is yes or no, or `qtype` is a comparison (any hop count)
  computed   the answer states a number that no tool result states: it was worked out from
             numbers the pages give (the years between two dates)
  multi-hop  `hop_count` is 2 or more (a bridge; a compositional or inference question of
             several hops)

Any other answer (one hop, neither compared nor computed) passes with "ok". A record whose
answer is neither compared nor computed and whose meta gives neither `qtype` nor `hop_count`
(a user's file without them) passes without being checked, `question_kind_unknown`, which
`--strict` turns into a reject, as for the other checks that could not run.

A deciding fact is a mention of the final think, a number or a capitalised name as the
grounding rule reads them (generators/synth/grounding.py), that
  - occurs in a tool result before the final turn (what a page or the calculator said),
  - is not the answer (nor one of its aliases, nor a name that holds one),
  - for a computed or multi-hop answer, does not occur in the question: the values the
    arithmetic uses, the entity in between (the bridge: a page an earlier lookup found);
    a computed answer needs a number;
  - for a compared answer, is not a page the conversation looked up (it occurs in no call's
    arguments): a comparison's pages are the things compared or the way to them (their
    capitals, their birthplaces), and what decides is the values the pages give them (the
    years, the populations, the two universities). A value the question names counts here
    ("... is in New York and ... is in New York, so yes").
A number counts whatever its size when written in digits, from ten up when written in words
(so "two pages" is no fact). A final think of an answer it applies to with no deciding fact
fails with `final_think_states_no_fact`; the detail gives the kind and the think.

For "Between Tethonia and Findavia, whose capital was founded more recently?", "The pages
about "Tethonia", "Findavia", "Dreath" and "Verath" give everything needed. Conclude that
the answer is Tethonia." fails (Findavia, Dreath and Verath were looked up, Tethonia is the
answer), and "Dreath was founded in 1855 and Verath in 1321, so the answer is Tethonia."
passes (1855 and 1321 are the values compared).

What the synthesized reasoning forms give: `--reasoning facts` (the default), `evidence` and
`plan` pass. `brief` names the pages found: for a bridge that names the page in between, a
computed answer's final think does the arithmetic, but the final think of a comparison or a
yes/no question names only the pages compared and fails, by design: such data teaches to
assert an answer. `forgeplay validate --no-final-facts` leaves this step out
(RuleContext.final_facts), for data made with `--reasoning brief` on purpose.

    detail = check_final_facts(msgs, lookups, answers, meta)   # raises Reject, else the detail
"""

from __future__ import annotations

from typing import Container

from generators.llm.toolcalls import split_think
from generators.synth.grounding import NUMBER_RE, SMALL, numbers_in
from generators.synth.names import Either, names_in
from generators.synth.sources import LowerOf, Sources
from validators.verdict import Reject

REASON = "final_think_states_no_fact"
UNKNOWN = "question_kind_unknown"
YES_NO = ("yes", "no")


def answer_kind(answers: list[str], results: Sources, meta: dict) -> str | None:
    """"compared", "computed", "multi-hop", "" (the step does not apply) or None (the record
    does not say: no yes/no or computed answer and no qtype or hop_count in its meta)."""
    gold = answers[0].strip().lower().rstrip(".") if answers else ""
    qtype = str(meta.get("qtype") or "").lower()
    if gold in YES_NO or qtype.startswith("comparison"):
        return "compared"
    numbers = numbers_in(answers[0]) if answers else []
    if numbers and not any(results.has_number(n) for n in numbers):
        return "computed"
    try:
        hops = int(meta.get("hop_count") or 0)
    except (TypeError, ValueError):
        hops = 0
    if hops >= 2:
        return "multi-hop"
    return "" if qtype or hops else None


def _is_answer(name: str, answers: list[str]) -> bool:
    """Whether `name` is an answer or holds one as whole words ("the Kingdom of Leivonia" holds
    "Kingdom of Leivonia"). A part of an answer may be a fact: the country "Lathavia", whose
    official name "Union of Lathavia" is asked."""
    return any(a.strip() and Sources([name]).has_name(a) for a in answers)


def deciding_facts(think: str, kind: str, question: str, results: Sources, lookups: Sources,
                   answers: list[str], common: Container[str]) -> list[str]:
    """The deciding facts `think` states for an answer of `kind` (module docstring), in order;
    `common` holds the lower-case words `names_in` reads as common words."""
    asked = Sources([question])
    digits = {v for m in NUMBER_RE.findall(think) for v in numbers_in(m)}
    said = {n for a in answers for n in numbers_in(a)}
    out = [n for n in dict.fromkeys(numbers_in(think))
           if results.has_number(n) and n not in said and (n in digits or float(n) >= SMALL)
           and (kind == "compared" or not asked.has_number(n))]
    if kind == "computed":
        return out
    for name in dict.fromkeys(names_in(think, common)):
        if not results.has_name(name) or _is_answer(name, answers):
            continue
        if lookups.has_name(name) if kind == "compared" else asked.has_name(name):
            continue
        out.append(name)
    return out


def check_final_facts(msgs: list[dict], lookups: list[str], answers: list[str], meta: dict,
                      before: Sources | None = None, think: str | None = None) -> dict:
    """Checks the final think of `msgs` (module docstring): `lookups` are the string arguments
    of the conversation's calls, `answers` the gold answer first, then its aliases and the
    answer given; `before` the messages before the final one as Sources and `think` the final
    think, when the caller has them (validators/grounding.py `ground`, the format step).
    Raises Reject, else returns the detail (kind, and the facts found)."""
    question = next((m.get("content") or "" for m in msgs if m.get("role") == "user"), "")
    tools = [k for k, m in enumerate(msgs[:-1]) if m.get("role") == "tool"]
    before = before or Sources([m.get("content") or "" for m in msgs[:-1]])
    results = before.subset(tools)
    kind = answer_kind(answers, results, meta)
    if kind is None:
        return {"reason": UNKNOWN}
    if not kind:
        return {"kind": "other"}
    if think is None:
        think = split_think(msgs[-1].get("content") or "").think or ""
    common = Either(LowerOf(before), Sources([think]).lower)
    facts = deciding_facts(think, kind, question, results, Sources(lookups), answers, common)
    if not facts:
        raise Reject(REASON, kind=kind, think=think[:300])
    return {"kind": kind, "facts": facts[:6]}

"""The LLM's share of a trajectory: the `<think>` text of every turn and the final answer
wording. One prompt per slot, sent in batches through any backend; output that is empty,
carries tags or code, runs on, or does not mention what the step is about (the entity it
looks up, the tool it fixes, the answer it gives) is replaced by a template written from
the same facts, and the trajectory records which text came from where.

Every think that announces lookups says what each one is ("Now I need to look up "Esia", a
place."), which tells the tool that finds it: a domain tool sees only its kind of pages.
With `--reasoning plan` the first think of a world question of several rounds lists every
lookup in order, each after the first as the question names it ("To answer this I need
"Dasta", then the author of the novel Dasta, then the city where the author of the novel
Dasta was born. First I will search for "Dasta", a creative work."), and every think after a
result names what it read as the plan did, then the plan's next item and the entity it is, each
by the name of the page read before it rather than the question's nested phrase ("The result has
the page about "Ilo Varn", the author of Dasta. Next is the city where Ilo Varn was
born, which is "Gaiwick", so now I need to look up "Gaiwick", a place."; it names one relation of
the page just read), or "Next is the calculator", or "That was the last lookup": how many
lookups a question takes is read off the question (a world triple's meta "phrases",
generators/corpus/questions.py). The final think of an answer that is not computed then says
what the last pages say and any comparison; a question that names the last page by a phrase (a
bridge) is first asked again of that page by its name, which points at the sentence that answers
it ("... That was the last lookup. The question is now: When was Gaiwick founded? It says Gaiwick
was founded in 988, so the answer is 988."). Without such a plan (a comparison of one round) it
states every fact and the comparison, as `--reasoning evidence` does.

With `--reasoning facts`, the default, the thinks along the way are those of `--reasoning
brief` and the final think states in one or two sentences every fact the answer follows from,
then what decides it (`_stated`: "The pages say Leivonia became independent in 1884 and
Tethonia became independent in 1580. 1884 is later than 1580, so the answer is Leivonia."); a
model is given those facts and its text must mention every value of the derivation, as below.
With `--reasoning brief` the final think names the pages found and concludes, so the rules
layer's `final_facts` check rejects it for comparisons and yes/no questions
(validators/final_facts.py).

No think states a number that nothing before it gives (generators/synth/evidence.py): a
brief final think whose answer is computed from numbers on the pages does the arithmetic ("The
pages about "Tranos" and "Esia" give everything needed. 1863 - 1783 = 80. Conclude that the
answer is 80."); with the calculator (generators/tools/compute.py) that arithmetic is first
sent to it ("... Now I need to compute 1863 - 1783 with the calculator."), so the final think
repeats a tool result; every think of such a trajectory starts with "The question asks for the
number of years between two dates." (`lead`: a small model reads at the start of its own think
what kind of question it answers, where it does not look back to the question; with `--lead
later` every think but the first, so every question's first think opens alike), and the think
before its last lookup ends ", then compute the answer with the calculator". With `--reasoning
evidence` every think after a lookup also states what the page said that leads to the next
lookup ("The result has the page about "Tranos". It says Tranos lies in Esia, so now I need
to look up "Esia", a place."), and every final think states its facts and the comparison or
arithmetic. The LLM is given those facts; its text is kept only if every number and name in
it is grounded (generators/synth/grounding.py) in the question, an earlier tool result or the
derivation (else "template:ungrounded"), and a final text that has facts must also mention
every value of the derivation and the answer (else "template:missing_derivation").

    prompts = [slot_prompt(question, slot) for slot in slots]
    texts = backend.generate([ChatRequest(messages=p, ...) for p in prompts])
    think, source = clean_think(texts[i][0].text, slot)
"""

from __future__ import annotations

import re

from generators.answers import match
from generators.synth.cases import opening, slot_texts
from generators.synth.sources import Sources, missing
from generators.synth.skeleton import Slot
from generators.synth.wording import and_list, clause_list, clauses, page_says, quoted, reads, then_compute, with_kinds

SYSTEM = ("You write the private reasoning of an assistant that answers questions by searching. "
          "Write one to three short sentences in the first person. Say what you look for and why, "
          "what the last result showed, and what went wrong if something did. State the facts you "
          "are given; mention no name, number or date that the question and the facts do not give. "
          "Do not write tool calls, tags, code or JSON.")

_BAD = re.compile(r"[<>{}\[\]`]|\b(?:tool_call|json)\b", re.I)
MAX_CHARS = 600


def _path(f: dict) -> str:
    """', then the founder of Dasta and ..., then the calculator': the lookups after the first
    round, as the question names them (the plan's `path`), then the calculator if it computes."""
    end = ", then the calculator" if f.get("computes") else ""
    return "".join(f", then {and_list(r)}" for r in f.get("path") or []) + end


def _was(f: dict) -> str:
    """', the founder of Dasta': what the question calls the pages just read (after the first round)."""
    return f", {and_list(f['was'])}" if f.get("was") else ""


def _said(f: dict) -> str:
    """'Next is the founder of Dasta, which is "Ilo Varn"': the plan's next item and the entity it
    is; 'Next is the calculator' or 'That was the last lookup' when the plan has no lookup left."""
    if "said" not in f:
        return ""
    if f["said"]:
        items = [f'{p}, which is "{q}"' for p, q in zip(f["said"], f["queries"])]
        return f"Next {'are' if len(items) > 1 else 'is'} {', and '.join(items)}"
    return "Next is the calculator" if f.get("expression") else "That was the last lookup"


def _now(f: dict) -> str:
    """' The question is now: When was Valor founded?': the question asked of the last page read,
    by its name, which points at the sentence of that page that answers it."""
    return f" The question is now: {f['asks']}" if f.get("asks") else ""


def describe(slot: Slot) -> str:
    """What the reasoning for this slot must say, in plain words (also the prompt's task)."""
    return opening(slot.facts) + _describe(slot)


def _describe(slot: Slot) -> str:
    f = slot.facts
    case_text = slot_texts().get(slot.kind)  # a slot a reflection case adds
    if case_text is not None:
        return case_text.describe(f)
    if slot.kind == "plan":
        last = " Last step: compute the answer with the calculator." if f.get("computes") else ""
        path = f"The question needs {quoted(f['queries'])}{_path(f)}. " if f.get("path") else ""
        return f"{path}First step: look up {with_kinds(f['queries'], f.get('kinds'))} with the search tools.{last}"
    if slot.kind == "next":
        says = f" It says: {reads(f)}" if f.get("read") else f" {_said(f)}." if f.get("said") else ""
        return (f"The last search found the page about {quoted(f['found'])}{_was(f)}.{says} "
                f"Next step: look up {with_kinds(f['queries'], f.get('kinds'))}{then_compute(f)}.")
    if slot.kind == "compute":
        says = f" It says: {reads(f)}" if f.get("read") else ""
        skipped = f" It already covers \"{f['skipped']}\", so that search is not needed." if f.get("skipped") else ""
        found = [x for x in f["found"] if x != f.get("skipped")]
        return (f"The last search found the page about {quoted(found)}.{skipped}{says} "
                f"Next step: compute {f['expression']} with the calculator.")
    if slot.kind == "final":
        if f.get("facts"):
            how, asks = " ".join(f.get("steps") or []), _now(f).lstrip()
            short = " in one or two sentences" if f.get("form") == "facts" else ""
            return (f"{asks + ' ' if asks else ''}The pages say: {' '.join(f['facts'])} {how + ' ' if how else ''}The answer is {f['answer']}. "
                    f"State these facts{', then the comparison or calculation' if how else ''}, then the answer{short}.")
        if f.get("steps"):  # brief: a computed answer
            return (f"The pages about {quoted(f['found'])} give everything needed. The answer is computed: "
                    f"{' '.join(f['steps'])} Write the calculation, then conclude that the answer is {f['answer']}.")
        early = f" The search for \"{f['skipped']}\" was skipped because an earlier result covered it." if f.get("skipped") else ""
        return (f"The pages about {quoted(f['found'])} give everything needed.{early} "
                f"Conclude that the answer is {f['answer']}.")
    if slot.kind == "answer":
        return f"Write only the short answer phrase meaning: {f['answer']}"
    raise ValueError(f"unknown slot kind {slot.kind!r}")


def _after_results(found: list[str], read: list[str] | None, then: str, skipped: str = "", plan: dict | None = None) -> str:
    """'The result has the page about "A".{skipped} It says ..., so now I need to {then}.' (the
    pages just found, what they say when `read`, and the next step). With a `plan` of phrases (a
    slot's facts): 'The result has the page about "B", the founder of A. Next is the city where the
    founder of A was born, which is "C", so now I need to {then}.'"""
    plan = plan or {}
    said = _said(plan)
    says = f" {page_says(found, read)}, so" if read else f" {said}, so" if said else ""
    return f"{_result(found, plan)}{skipped}{says} {'n' if says else 'N'}ow I need to {then}."


def _result(found: list[str], plan: dict) -> str:
    """'The result has the page about "B", the founder of A.' (what the question calls it, if known)."""
    return f"The result{'s have the pages' if len(found) > 1 else ' has the page'} about {quoted(found)}{_was(plan)}."


def _stated(f: dict) -> str:
    """The final think of `--reasoning facts`: every fact the answer follows from as a clause of one
    sentence (joined by semicolons when a clause has a comma of its own), then what decides it and
    the answer ('The pages say Tethonia is governed from its capital, Dreath; Dreath was founded in
    1855; Findavia is governed from its capital, Verath; and Verath was founded in 1321. 1855 is later
    than 1321, so the answer is Tethonia.'); a chain's facts are its derivation ('..., so the answer
    is X.')."""
    parts = clause_list(f["facts"])
    if len(parts) > 1 and any("," in p for p in parts):  # "A is governed from its capital, B; B was founded ..."
        facts = "; ".join(parts[:-1]) + "; and " + parts[-1]
    else:
        facts = and_list(parts)
    said = f"{'The pages say' if len(f['found']) > 1 else 'The page says'} {facts}"
    how = " ".join(s.strip() for s in f.get("steps") or []).removesuffix(".")
    return f"{said}{'. ' + how if how else ''}, so the answer is {f['answer']}."


ASKS = "The question asks for"  # how a computed answer's thinks open (`lead`)
YEARS = f"{ASKS} the number of years between two dates."


def lead(slot: Slot, text: str, first: bool = True) -> str:
    """A think as it goes into the trajectory: with the calculator, every think of a computed
    answer starts with `YEARS`, whoever wrote the rest, so the turn after each lookup reads at
    its own start what kind of question this is and that the calculator comes last; the first
    think (the plan) too when `first`."""
    return f"{YEARS} {text}" if slot.facts.get("years") and (first or slot.kind != "plan") else text


def template(slot: Slot) -> str:
    """The reasoning written by the program, used when the LLM's text is unusable."""
    return opening(slot.facts) + _template(slot)


def _template(slot: Slot) -> str:
    f = slot.facts
    case_text = slot_texts().get(slot.kind)
    if case_text is not None and case_text.template is not None:
        return case_text.template(f)
    if slot.kind == "plan":
        if f.get("path"):
            return (f"To answer this I need {quoted(f['queries'])}{_path(f)}. "
                    f"First I will search for {with_kinds(f['queries'], f.get('kinds'))}.")
        if f.get("computes"):
            return (f"I will search for {with_kinds(f['queries'], f.get('kinds'))} first, "
                    f"and at the end compute the answer with the calculator.")
        them = "them" if len(f["queries"]) > 1 else "it"
        return (f"To answer this I need to look up {with_kinds(f['queries'], f.get('kinds'))}. "
                f"I will search for {them} first.")
    if slot.kind == "next":
        return _after_results(f["found"], f.get("read"), f"look up {with_kinds(f['queries'], f.get('kinds'))}{then_compute(f)}",
                              plan=f)
    if slot.kind == "compute":  # after the last lookup, or after an early stop that skipped it
        found = [x for x in f["found"] if x != f.get("skipped")]
        skipped = f" It already has the page about \"{f['skipped']}\" too." if f.get("skipped") else ""
        return _after_results(found, f.get("read"), f"compute {f['expression']} with the calculator", skipped,
                              plan=f if not skipped else None)
    if slot.kind == "final" and f.get("form") == "facts":
        return _stated(f)
    if slot.kind == "final" and f.get("last") and not f.get("facts") and not f.get("steps"):  # brief, planned
        return (f"{_result(f['last'], f)} {_said(f)}, so the pages about {quoted(f['found'])} give everything needed. "
                f"Conclude that the answer is {f['answer']}.")
    if slot.kind == "final" and f.get("steps") and not f.get("facts"):  # brief: a computed answer's arithmetic
        return (f"The pages about {quoted(f['found'])} give everything needed. {' '.join(f['steps'])} "
                f"Conclude that the answer is {f['answer']}.")
    if slot.kind == "final" and f.get("last") and f.get("facts"):  # plan: the last pages give the answer
        says = f"{_result(f['last'], f)} {_said(f)}.{_now(f)} {page_says(f['last'], f['facts'])}"
        if f.get("steps"):  # a comparison of what they say
            return f"{says}. {' '.join(f['steps'])} So the answer is {f['answer']}."
        return f"{says}, so the answer is {f['answer']}."
    if slot.kind == "final" and f.get("facts"):
        said = " ".join(f["facts"]) if not f.get("quoted") else f"They say {clauses(f['facts'])}."
        return " ".join([f"The pages about {quoted(f['found'])} give everything needed.", said,
                         *(f.get("steps") or []), f"So the answer is {f['answer']}."])
    if slot.kind == "answer":
        return f["answer"]
    return _describe(slot).replace("Next step: ", "So I will ").replace("First step: ", "I will ")


def slot_prompt(question: str, slot: Slot) -> list[dict]:
    if slot.kind == "answer":
        return [{"role": "system", "content": "Answer with a short phrase only, no sentence."},
                {"role": "user", "content": f"Question: {question}\nThe answer is {slot.facts['answer']}. "
                                            f"Write only the answer phrase."}]
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Question: {question}\nSituation: {describe(slot)}\n"
                                        f"Write the reasoning for this step."}]


def key_terms(slot: Slot) -> list[str]:
    """Words the reasoning of this slot must mention at least one of, so that it agrees
    with the action that follows (what it looks up, which tool it fixes, the answer)."""
    f = slot.facts
    if slot.kind in ("plan", "next"):
        return list(f.get("queries") or f.get("found") or [])
    case_text = slot_texts().get(slot.kind)
    if case_text is not None:
        return case_text.terms(f)
    if slot.kind == "compute":
        return [f["expression"], *f["operands"]]
    if slot.kind == "final":
        return [f["answer"]]
    return []


def ungrounded(text: str, slot: Slot) -> list[tuple[str, str]]:
    """Numbers and names of `text` found in none of the slot's sources (the question, the
    earlier tool results and, for the final slot, the derivation); [] when the slot has no
    sources recorded."""
    if slot.sources is None:
        return []
    extra = [*slot.facts.get("facts", []), *slot.facts.get("steps", []), str(slot.facts.get("answer", ""))] \
        if slot.kind == "final" else []
    return Sources([*slot.sources, *extra]).ungrounded(text)


def _mentions(text: str, terms: list[str]) -> bool:
    low = text.lower()
    return any(t and t.lower() in low for t in terms)


def clean_think(text: str, slot: Slot) -> tuple[str, str]:
    """(text to use, "llm" | "template:<reason>")."""
    t = (text or "").strip()
    t = re.sub(r"^(reasoning|thought|answer)\s*:\s*", "", t, flags=re.I).strip()
    t = t.split("\n\n")[0].strip()
    if slot.kind == "answer":
        m = match(t.rstrip("."), slot.facts["answer"], slot.facts["aliases"])
        if t and m.em and len(t) <= 100:
            return t.rstrip("."), "llm"
        return template(slot), "template:answer_mismatch"
    if not t:
        return template(slot), "template:empty"
    if _BAD.search(t):
        return template(slot), "template:markup"
    if len(t) > MAX_CHARS * (2 if slot.kind == "final" else 1):  # a final think states every fact
        return template(slot), "template:too_long"
    if len(t.split()) < 4:
        return template(slot), "template:too_short"
    terms = key_terms(slot)
    if terms and not _mentions(t, terms):
        return template(slot), "template:off_topic"
    if ungrounded(t, slot):
        return template(slot), "template:ungrounded"
    if slot.kind == "final" and missing(t, slot.facts.get("required") or []):
        return template(slot), "template:missing_derivation"
    return t, "llm"

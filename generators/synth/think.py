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
from generators.corpus.templates import TEMPLATES
from generators.synth.grounding import Sources, missing
from generators.synth.skeleton import Slot

SYSTEM = ("You write the private reasoning of an assistant that answers questions by searching. "
          "Write one to three short sentences in the first person. Say what you look for and why, "
          "what the last result showed, and what went wrong if something did. State the facts you "
          "are given; mention no name, number or date that the question and the facts do not give. "
          "Do not write tool calls, tags, code or JSON.")

_BAD = re.compile(r"[<>{}\[\]`]|\b(?:tool_call|json)\b", re.I)
MAX_CHARS = 600


def _names(xs: list[str]) -> str:
    """'A', 'A and B', 'A, B and C'."""
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1] if xs else ""


def _join(xs: list[str]) -> str:
    """The names quoted: '"A" and "B"'."""
    return _names([f'"{x}"' for x in xs])


# the words a page sentence starts with when it does not start with its subject ("As of the last
# census, ...", "Notable people born in ..."): lower-cased when the sentence becomes a clause
_OPENERS = {"The"} | {t.text.split()[0] for t in TEMPLATES if not t.text.startswith("{")}


def _clause_list(sentences: list[str]) -> list[str]:
    """Fact sentences as clauses: no full stop, an opening word of the page templates in lower case."""
    out = []
    for s in sentences:
        s = s.strip()
        s = s[:-1] if s.endswith(".") and not s.endswith('."') else s
        first = s.split(" ", 1)[0]
        out.append(first.lower() + s[len(first):] if first in _OPENERS else s)
    return out


def _clauses(sentences: list[str]) -> str:
    """Fact sentences as clauses of one sentence ("A is in B and B has 16 provinces")."""
    return _names(_clause_list(sentences))


def _clip(text: str, n: int) -> str:
    """`text` cut to at most `n` characters at a space (no half word or half number)."""
    return text if len(text) <= n else text[:n].rsplit(" ", 1)[0]


KIND = {"person": ("a person", "people"), "place": ("a place", "places"),
        "organisation": ("an organisation", "organisations"), "work": ("a creative work", "creative works"),
        "event": ("an event", "events"), "science": ("a scientific concept", "scientific concepts"),
        "general": ("a page of any kind", "pages of any kind")}


def _what(names: list[str], kinds: list[str] | None, quote: bool = True) -> str:
    """The names of the next lookups with what each one is, which tells the tool that finds it:
    '"Dasta", a creative work', '"A" and "B", both places', '"A" (a person) and "B" (a place)'."""
    said = _join(names) if quote else _names(names)
    kinds = [k for k in kinds or [] if k in KIND]
    if len(kinds) != len(names) or not names:
        return said
    if len(set(kinds)) == 1:
        one, many = KIND[kinds[0]]
        return f"{said}, {one}" if len(names) == 1 else f"{said}, {'both' if len(names) == 2 else 'all'} {many}"
    parts = [f'{chr(34) + n + chr(34) if quote else n} ({KIND[k][0]})' for n, k in zip(names, kinds)]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _reads(f: dict) -> str:
    """What the last result says, for a prompt."""
    return " ".join(f.get("read") or [])


def _then(f: dict) -> str:
    """', then compute ...' when the lookup a slot announces is a computed answer's last one."""
    return ", then compute the answer with the calculator" if f.get("computes") else ""


def _path(f: dict) -> str:
    """', then the founder of Dasta and ..., then the calculator': the lookups after the first
    round, as the question names them (the plan's `path`), then the calculator if it computes."""
    end = ", then the calculator" if f.get("computes") else ""
    return "".join(f", then {_names(r)}" for r in f.get("path") or []) + end


def _was(f: dict) -> str:
    """', the founder of Dasta': what the question calls the pages just read (after the first round)."""
    return f", {_names(f['was'])}" if f.get("was") else ""


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


def _again(f: dict) -> str:
    """'This is the same page about "B" as before, so I will not search for it again. ': the first
    words of the think after a repeated lookup (the repeat case), else ''."""
    if not f.get("again"):
        return ""
    many = len(f["again"]) > 1
    return (f"This is the same {'pages' if many else 'page'} about {_join(f['again'])} as before, so I will not "
            f"search for {'them' if many else 'it'} again. ")


def describe(slot: Slot) -> str:
    """What the reasoning for this slot must say, in plain words (also the prompt's task)."""
    return _again(slot.facts) + _describe(slot)


def _describe(slot: Slot) -> str:
    f = slot.facts
    if slot.kind == "plan":
        last = " Last step: compute the answer with the calculator." if f.get("computes") else ""
        path = f"The question needs {_join(f['queries'])}{_path(f)}. " if f.get("path") else ""
        return f"{path}First step: look up {_what(f['queries'], f.get('kinds'))} with the search tools.{last}"
    if slot.kind == "next":
        says = f" It says: {_reads(f)}" if f.get("read") else f" {_said(f)}." if f.get("said") else ""
        return (f"The last search found the page about {_join(f['found'])}{_was(f)}.{says} "
                f"Next step: look up {_what(f['queries'], f.get('kinds'))}{_then(f)}.")
    if slot.kind == "fix_args":
        return (f"The call to {f['tool']} failed because its arguments were invalid ({_clip(f['error'], 120)}). "
                f"Next step: call {f['tool']} again with a proper query for \"{f['query']}\".")
    if slot.kind == "switch_tool":
        return (f"The tool {f['wrong_tool']} searches the wrong kind of pages and did not find \"{f['query']}\". "
                f"Next step: use {f['tool']} instead.")
    if slot.kind == "no_tool":
        return (f"There is no tool named {f['tool']}, so the call failed. "
                f"Next step: search for \"{f['query']}\" with the general search {f['general']}, "
                f"which finds pages of any kind.")
    if slot.kind == "escalate":
        return (f"{f['tool']} returned pages that do not contain the needed fact about \"{f['query']}\". "
                f"Next step: try the general search {f['general']}.")
    if slot.kind == "early_stop":
        rest = f" Next step: look up {_join(f['queries'])}{_then(f)}." if f["queries"] else ""
        says = f" It says: {_reads(f)}" if f.get("read") else ""
        return (f"I had planned to look up \"{f['skipped']}\" next, but the last result already contains that "
                f"page, so that search is not needed.{says}{rest}")
    if slot.kind == "compute":
        says = f" It says: {_reads(f)}" if f.get("read") else ""
        skipped = f" It already covers \"{f['skipped']}\", so that search is not needed." if f.get("skipped") else ""
        found = [x for x in f["found"] if x != f.get("skipped")]
        return (f"The last search found the page about {_join(found)}.{skipped}{says} "
                f"Next step: compute {f['expression']} with the calculator.")
    if slot.kind == "final":
        if f.get("facts"):
            how, asks = " ".join(f.get("steps") or []), _now(f).lstrip()
            short = " in one or two sentences" if f.get("form") == "facts" else ""
            return (f"{asks + ' ' if asks else ''}The pages say: {' '.join(f['facts'])} {how + ' ' if how else ''}The answer is {f['answer']}. "
                    f"State these facts{', then the comparison or calculation' if how else ''}, then the answer{short}.")
        if f.get("steps"):  # brief: a computed answer
            return (f"The pages about {_join(f['found'])} give everything needed. The answer is computed: "
                    f"{' '.join(f['steps'])} Write the calculation, then conclude that the answer is {f['answer']}.")
        early = f" The search for \"{f['skipped']}\" was skipped because an earlier result covered it." if f.get("skipped") else ""
        return (f"The pages about {_join(f['found'])} give everything needed.{early} "
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
    says = f" {_says(found, read)}, so" if read else f" {said}, so" if said else ""
    return f"{_result(found, plan)}{skipped}{says} {'n' if says else 'N'}ow I need to {then}."


def _says(pages: list[str], facts: list[str]) -> str:
    """'It says A is in B' ('They say ...' for several pages): what the pages just read state."""
    return f"{'They say' if len(pages) > 1 else 'It says'} {_clauses(facts)}"


def _result(found: list[str], plan: dict) -> str:
    """'The result has the page about "B", the founder of A.' (what the question calls it, if known)."""
    return f"The result{'s have the pages' if len(found) > 1 else ' has the page'} about {_join(found)}{_was(plan)}."


def _stated(f: dict) -> str:
    """The final think of `--reasoning facts`: every fact the answer follows from as a clause of one
    sentence (joined by semicolons when a clause has a comma of its own), then what decides it and
    the answer ('The pages say Tethonia is governed from its capital, Dreath; Dreath was founded in
    1855; Findavia is governed from its capital, Verath; and Verath was founded in 1321. 1855 is later
    than 1321, so the answer is Tethonia.'); a chain's facts are its derivation ('..., so the answer
    is X.')."""
    parts = _clause_list(f["facts"])
    if len(parts) > 1 and any("," in p for p in parts):  # "A is governed from its capital, B; B was founded ..."
        facts = "; ".join(parts[:-1]) + "; and " + parts[-1]
    else:
        facts = _names(parts)
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
    return _again(slot.facts) + _template(slot)


def _template(slot: Slot) -> str:
    f = slot.facts
    if slot.kind == "plan":
        if f.get("path"):
            return (f"To answer this I need {_join(f['queries'])}{_path(f)}. "
                    f"First I will search for {_what(f['queries'], f.get('kinds'))}.")
        if f.get("computes"):
            return (f"I will search for {_what(f['queries'], f.get('kinds'))} first, "
                    f"and at the end compute the answer with the calculator.")
        them = "them" if len(f["queries"]) > 1 else "it"
        return (f"To answer this I need to look up {_what(f['queries'], f.get('kinds'))}. "
                f"I will search for {them} first.")
    if slot.kind == "next":
        return _after_results(f["found"], f.get("read"), f"look up {_what(f['queries'], f.get('kinds'))}{_then(f)}",
                              plan=f)
    if slot.kind == "compute":  # after the last lookup, or after an early stop that skipped it
        found = [x for x in f["found"] if x != f.get("skipped")]
        skipped = f" It already has the page about \"{f['skipped']}\" too." if f.get("skipped") else ""
        return _after_results(found, f.get("read"), f"compute {f['expression']} with the calculator", skipped,
                              plan=f if not skipped else None)
    if slot.kind == "early_stop" and f.get("read"):
        rest = f" Now I need to look up {_what(f['queries'], f.get('kinds'))}{_then(f)}." if f["queries"] else ""
        return (f"The result already has the page about \"{f['skipped']}\" too. {_says([f['skipped']], f['read'])}, "
                f"so I do not need to search for \"{f['skipped']}\".{rest}")
    if slot.kind == "final" and f.get("form") == "facts":
        return _stated(f)
    if slot.kind == "final" and f.get("last") and not f.get("facts") and not f.get("steps"):  # brief, planned
        return (f"{_result(f['last'], f)} {_said(f)}, so the pages about {_join(f['found'])} give everything needed. "
                f"Conclude that the answer is {f['answer']}.")
    if slot.kind == "final" and f.get("steps") and not f.get("facts"):  # brief: a computed answer's arithmetic
        return (f"The pages about {_join(f['found'])} give everything needed. {' '.join(f['steps'])} "
                f"Conclude that the answer is {f['answer']}.")
    if slot.kind == "final" and f.get("last") and f.get("facts"):  # plan: the last pages give the answer
        says = f"{_result(f['last'], f)} {_said(f)}.{_now(f)} {_says(f['last'], f['facts'])}"
        if f.get("steps"):  # a comparison of what they say
            return f"{says}. {' '.join(f['steps'])} So the answer is {f['answer']}."
        return f"{says}, so the answer is {f['answer']}."
    if slot.kind == "final" and f.get("facts"):
        said = " ".join(f["facts"]) if not f.get("quoted") else f"They say {_clauses(f['facts'])}."
        return " ".join([f"The pages about {_join(f['found'])} give everything needed.", said,
                         *(f.get("steps") or []), f"So the answer is {f['answer']}."])
    if slot.kind == "no_tool":
        return (f"There is no tool named {f['tool']}. The general search {f['general']} finds pages of any kind, "
                f"so now I will search for \"{f['query']}\" with it.")
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
    if slot.kind in ("fix_args", "switch_tool", "escalate", "no_tool"):
        return [f["query"], f.get("tool", ""), f.get("general", "")]
    if slot.kind == "early_stop":
        return [f["skipped"], *f.get("queries", [])]
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

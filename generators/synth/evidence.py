"""The evidence a trajectory's reasoning states: which facts each page gives, and how the
answer follows from them.

For a world triple the relation program (generators/corpus/derive.py) is run again over
the facts of the golden documents, recording every fact it reads. Each fact is stated as
one sentence of the corpus's own grammar with its subject named (the document's sentence
itself when it states only that fact: "Her birthplace was Handova." becomes "Dera
Chedroulda's birthplace was Handova."), so the derive parser reads it back. After the
facts come the steps that turn them into the answer:

  chain          none: the facts are the derivation
  absdiff        "1861 - 988 = 873."
  argmin/argmax  "Oupeir Works: 982,100; Deram Works: 850,000." "850,000 is smaller than 982,100."
  eq             "Both give Breary." / "Breary and Zuistan are different."

An imported triple (no program) gets its supporting sentences, quoted, and no derivation.

    ev = evidence_for(triple, {doc_id: (title, text)})
    ev.read[doc_id]       # what is stated after reading that page
    ev.facts, ev.steps    # the final reasoning: every fact, then the derivation
    ev.expression         # a computed answer's arithmetic, for the calculator: "1861 - 988"
    ev.decisive           # the steps a final think of `--reasoning facts` states (no listing)
    ev.required           # what the final reasoning must mention: fact values and the answer
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache

from generators.corpus.derive import EXTRACTOR, DerivationError, Fact, FactBase, evaluate, run_chain
from generators.corpus.relations import REL, format_value, value_kind
from generators.corpus.templates import TEMPLATES


@dataclass
class Evidence:
    read: dict[str, list[str]] = field(default_factory=dict)  # doc_id -> sentences stated after reading it
    facts: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    required: list[str] = field(default_factory=list)
    quoted: bool = False  # facts are quoted supporting sentences (no program)
    computed: bool = False  # the answer is a number computed from the facts (absdiff), found on no page
    expression: str = ""  # a computed answer's arithmetic ("1863 - 1783"), what the calculator is asked
    op: str = ""  # the program's last step: "chain", "absdiff", "argmin", "argmax", "eq" ("" without a program)

    @property
    def decisive(self) -> list[str]:
        """The steps that decide the answer: a comparison's verdict without the listing of every
        candidate's value before it ("850,000 is smaller than 982,100."), the arithmetic, the
        sameness; the values themselves are in the facts."""
        return self.steps[1:] if self.op in ("argmin", "argmax") else list(self.steps)


def _norm_title(s: str) -> str:
    s = " ".join(str(s).split()).lower()
    return s[4:] if s.startswith("the ") else s


def _with_article(name: str, text: str) -> str:
    """"the NAME" when `text` says "the NAME" or "The NAME" as whole words (what the pattern
    \\b[Tt]he NAME\\b finds, \\w being str.isalnum() or "_"), else the name."""
    for phrase in (f"the {name}", f"The {name}"):
        at = text.find(phrase)
        while at >= 0:
            end = at + len(phrase)
            if (at == 0 or not _word(text[at - 1])) and _word(phrase[-1]) != (end < len(text) and _word(text[end])):
                return f"the {name}"
            at = text.find(phrase, at + 1)
    return name


def _word(c: str) -> bool:
    return c.isalnum() or c == "_"


def _shown(rel: str, value) -> str:
    """A value as the reasoning writes it (numbers with commas, years and counts as digits)."""
    return format_value(rel, value) if value_kind(rel) != "list" else ", ".join(value)


def state(fact: Fact, page: str) -> str:
    """`fact` as one sentence with its subject named; `page` is the subject's document text
    (it tells whether a name takes "the")."""
    template = _template(fact.sentence, fact.rel)
    if template is None:
        return fact.sentence
    value = fact.value
    if REL[fact.rel].is_entity:
        value = _with_article(value, fact.sentence)
    return template.render(_with_article(fact.subject, page), {fact.rel: value})


@lru_cache(maxsize=1 << 14)
def _template(sentence: str, rel: str):
    """The template that states relation `rel` alone, as `sentence` does: one that matches the
    sentence, else the first of those that apply where the sentence's templates do (subject
    first, then the shortest); None when there is none. (Kept for the sentences read last: a
    page's facts are stated again by every trajectory that reads it.)"""
    matched = [t for t, _ in EXTRACTOR.matches(sentence) if rel in t.rels]
    own = [t for t in matched if t.rels == (rel,)]
    if own:
        return own[0]
    applies = frozenset(a for t in matched for a in t.applies)
    return _stating(rel, applies)


@lru_cache(maxsize=None)
def _stating(rel: str, applies: frozenset):
    """The first template (subject first, then the shortest) that states `rel` alone and applies
    to one of `applies`, or None."""
    pool = sorted((t for t in TEMPLATES if t.rels == (rel,) and applies & set(t.applies)),
                  key=lambda t: (not t.subject_first, len(t.text), t.text))
    return pool[0] if pool else None


def _compare(op: str, scored: list[tuple[str, object, str]]) -> list[str]:
    """Steps of an argmin/argmax over (candidate, value, relation)."""
    rel = scored[0][2]
    words = ("earlier", "later", "earliest", "latest") if value_kind(rel) == "year" else \
        ("smaller", "larger", "smallest", "largest")
    pick = min if op == "argmin" else max
    win = pick(scored, key=lambda s: s[1])
    listing = "; ".join(f"{name}: {_shown(r, v)}" for name, v, r in scored) + "."
    if len(scored) == 2:
        lose = next(s for s in scored if s is not win)
        word = words[0] if op == "argmin" else words[1]
        return [listing, f"{_shown(rel, win[1])} is {word} than {_shown(rel, lose[1])}."]
    word = words[2] if op == "argmin" else words[3]
    return [listing, f"{_shown(rel, win[1])} is the {word}."]


def _value_text(expr, value) -> str:
    if isinstance(expr, list) and expr:
        return _shown(expr[-1][1], value)
    return str(value)


def derivation_steps(program, facts: FactBase) -> list[str]:
    """The steps after the facts (module docstring); reads the facts through `facts`."""
    if isinstance(program, list) or "const" in program:
        evaluate(program, facts)
        return []
    op = program.get("op")
    if op in ("argmin", "argmax"):
        scored = [(c["answer"], run_chain(c["chain"], facts), c["chain"][-1][1]) for c in program["candidates"]]
        return _compare(op, scored)
    a, b = (evaluate(x, facts) for x in program["args"])
    ta, tb = (_value_text(x, v) for x, v in zip(program["args"], (a, b)))
    if op == "absdiff":
        (hi, th), (lo, tl) = sorted([(a, ta), (b, tb)], key=lambda x: -x[0])
        return [f"{th} - {tl} = {hi - lo}."]
    if op == "eq":
        return [f"Both give {ta}."] if a == b else [f"{ta} and {tb} are different."]
    raise DerivationError(f"unknown program {program!r}")


def _quoted(triple: dict, docs: dict[str, tuple[str, str]]) -> Evidence:
    ev = Evidence(quoted=True, required=[triple["answer"]])
    for f in triple.get("supporting_facts") or []:
        if f["doc_id"] in docs and f["sentence"].strip():
            q = f'"{f["sentence"].strip()}"'
            ev.read.setdefault(f["doc_id"], []).append(q)
            ev.facts.append(q)
    return ev


def evidence_for(triple: dict, docs: dict[str, tuple[str, str]], cache: dict | None = None) -> Evidence:
    """The evidence of `triple` from its golden documents (`docs` maps doc_id to (title, text));
    supporting sentences when it has no program or the program does not run."""
    meta = json.loads(triple.get("meta") or "{}")
    program = meta.get("program") if isinstance(meta, dict) else None
    golden = [d for d in triple["golden_doc_ids"] if d in docs]
    if program is None:
        return _quoted(triple, docs)
    facts = FactBase.from_docs([docs[d] for d in golden], cache=cache)
    try:
        steps = derivation_steps(program, facts)
    except (DerivationError, KeyError, TypeError, ValueError):
        return _quoted(triple, docs)
    by_title = {_norm_title(docs[d][0]): d for d in golden}
    op = program.get("op", "chain") if isinstance(program, dict) and "const" not in program else "chain"
    computed = op == "absdiff"
    ev = Evidence(steps=steps, computed=computed, expression=steps[0].rsplit(" = ", 1)[0] if computed else "", op=op)
    seen = set()
    for fact in facts.used:
        if (fact.subject, fact.rel) in seen:
            continue
        seen.add((fact.subject, fact.rel))
        doc = by_title.get(_norm_title(fact.subject))
        sentence = state(fact, docs[doc][1] if doc else fact.sentence)
        if sentence not in ev.facts:
            ev.facts.append(sentence)
            ev.read.setdefault(doc or "", []).append(sentence)
        ev.required.append(_shown(fact.rel, fact.value))
    ev.required = list(dict.fromkeys(ev.required + [triple["answer"]]))
    return ev

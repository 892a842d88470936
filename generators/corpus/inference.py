"""Inference questions: relations defined by a rule over the stated facts.

Each rule takes a `QuestionMaker` and returns a `Question` (qtype "inference") or None;
`inference` draws one rule. `make_question(qm, qtype)` makes a question of any type.
Yes/no rules draw a matching pair about half of the time, so "yes" and "no" are balanced.

  native_country      native country of X = country of X's birthplace
  same_birth_country  were A and B born in the same country?
  same_employer       did A and B work for the same organisation?
  same_university     did A and B study at the same university?
  worked_for_publisher did A work for the organisation that published W?
  same_hq_country     are organisations A and B headquartered in the same country?
  event_in_country    did event E take place in country K?
"""

from __future__ import annotations

from generators.corpus.names import capitalise
from generators.corpus.relations import NP, pick
from generators.corpus.questions import MAX_HOPS, Question, QuestionMaker
from generators.corpus.world import Entity

P_YES = 0.5


def _key(qm: QuestionMaker, e: Entity, rels: list[str]) -> str:
    return qm.value_at(e, rels)[1]


def _grouped(qm: QuestionMaker, spec: str, rels: list[str]) -> dict[str, list[Entity]]:
    """Entities of `spec` grouped by the value reached through `rels` (cached)."""
    key = (spec, tuple(rels))
    if key not in qm.index:
        groups: dict[str, list[Entity]] = {}
        for e in qm.pool(spec):
            groups.setdefault(_key(qm, e, rels), []).append(e)
        qm.index[key] = groups
    return qm.index[key]


def _pair(qm: QuestionMaker, spec: str, rels: list[str]) -> tuple[Entity, Entity, bool] | None:
    """Two distinct entities that share the value through `rels` (yes) or do not (no)."""
    r = qm.rng
    a = r.choice(qm.pool(spec))
    same = _grouped(qm, spec, rels)[_key(qm, a, rels)]
    want_yes = r.random() < P_YES
    for _ in range(20):
        b = r.choice(same) if want_yes else r.choice(qm.pool(spec))
        if b.id != a.id and (_key(qm, a, rels) == _key(qm, b, rels)) == want_yes:
            return a, b, want_yes
    return None


def _eq_question(qm: QuestionMaker, a: Entity, rels_a: list[str], b: Entity, rels_b: list[str],
                 text: str) -> Question | None:
    steps = qm.walk(a, rels_a) + qm.walk(b, rels_b)
    if len(dict.fromkeys(s for s, _ in steps)) > MAX_HOPS:
        return None
    same = qm.value_at(a, rels_a)[1] == qm.value_at(b, rels_b)[1]
    program = {"op": "eq", "args": [qm.program_chain(qm.walk(a, rels_a)), qm.program_chain(qm.walk(b, rels_b))]}
    return Question("inference", capitalise(text), "yes" if same else "no", [], steps, program)


def native_country(qm: QuestionMaker) -> Question | None:
    r = qm.rng
    if r.random() < 0.5:
        start, prefix = r.choice(qm.pool("person")), []
    else:
        start = r.choice(qm.pool(r.choice(["work", "org", "concept"])))
        prefix = [{"work": "creator", "org": "founder", "concept": "discoverer"}[start.type]]
    said: dict[str, str] = {}
    x, person = qm.chain_np(start, prefix, said)
    steps = qm.walk(start, prefix + ["birthplace", "country"])
    said.setdefault(qm.w.name(person.facts["birthplace"]), f"the birthplace of {x}")
    form = r.choice(["Which country is {x} a native of?", "What is the native country of {x}?",
                     "In which country was {x} born?"])
    answer, aliases = qm.entity_answer(qm.w.by_id[qm.value_at(start, prefix + ["birthplace", "country"])[1]])
    return Question("inference", capitalise(form.format(x=x)), answer, aliases, steps, qm.program_chain(steps),
                    {"phrases": said})


def same_birth_country(qm: QuestionMaker) -> Question | None:
    got = _pair(qm, "person", ["birthplace", "country"])
    if got is None:
        return None
    a, b, _ = got
    form = qm.rng.choice(["Were {a} and {b} born in the same country?", "Are {a} and {b} natives of the same country?"])
    rels = ["birthplace", "country"]
    return _eq_question(qm, a, rels, b, rels, form.format(a=qm.mention(a), b=qm.mention(b)))


def same_employer(qm: QuestionMaker) -> Question | None:
    got = _pair(qm, "person", ["employer"])
    if got is None:
        return None
    a, b, _ = got
    form = qm.rng.choice(["Did {a} and {b} work for the same organisation?", "Were {a} and {b} colleagues at the same employer?"])
    return _eq_question(qm, a, ["employer"], b, ["employer"], form.format(a=qm.mention(a), b=qm.mention(b)))


def same_university(qm: QuestionMaker) -> Question | None:
    got = _pair(qm, "person", ["alma_mater"])
    if got is None:
        return None
    a, b, _ = got
    form = qm.rng.choice(["Did {a} and {b} study at the same university?", "Are {a} and {b} alumni of the same university?"])
    return _eq_question(qm, a, ["alma_mater"], b, ["alma_mater"], form.format(a=qm.mention(a), b=qm.mention(b)))


def worked_for_publisher(qm: QuestionMaker) -> Question | None:
    r = qm.rng
    w = r.choice(qm.pool("work"))
    staff = _grouped(qm, "person", ["employer"]).get(w.facts["publisher"], [])
    if r.random() < P_YES and staff:
        p = r.choice(staff)
    else:
        p = r.choice(qm.pool("person"))
    if p.id == w.facts["creator"]:
        return None
    org_np = r.choice(pick(NP, "publisher", w.subtype, w.type)).format(x=qm.mention(w))
    return _eq_question(qm, p, ["employer"], w, ["publisher"], f"Did {qm.mention(p)} work for {org_np}?")


def same_hq_country(qm: QuestionMaker) -> Question | None:
    got = _pair(qm, "org", ["headquarters", "country"])
    if got is None:
        return None
    a, b, _ = got
    rels = ["headquarters", "country"]
    form = qm.rng.choice(["Are {a} and {b} headquartered in the same country?",
                          "Are {a} and {b} based in the same country?"])
    return _eq_question(qm, a, rels, b, rels, form.format(a=qm.mention(a), b=qm.mention(b)))


def event_in_country(qm: QuestionMaker) -> Question | None:
    r = qm.rng
    ev = r.choice(qm.pool("event"))
    actual = qm.value_at(ev, ["location", "country"])[1]
    country = qm.w.by_id[actual] if r.random() < P_YES else r.choice(qm.pool("country"))
    steps = qm.walk(ev, ["location", "country"])
    verb = {"treaty": "Was {e} signed in {k}?", "expedition": "Did {e} set out from {k}?"}.get(
        ev.subtype, "Did {e} take place in {k}?")
    program = {"op": "eq", "args": [qm.program_chain(steps), {"const": country.name}]}
    return Question("inference", capitalise(verb.format(e=qm.mention(ev), k=country.name)),
                    "yes" if country.id == actual else "no", [], steps, program)


RULES = [native_country, same_birth_country, same_employer, same_university, worked_for_publisher,
         same_hq_country, event_in_country]


def inference(qm: QuestionMaker) -> Question | None:
    """A question from one rule drawn at random (the rule's name goes in `extra`)."""
    rule = qm.rng.choice(RULES)
    q = rule(qm)
    if q is not None:
        q.extra["rule"] = rule.__name__
    return q


MAKERS = {"bridge": QuestionMaker.bridge, "comparison": QuestionMaker.comparison,
          "compositional": QuestionMaker.compositional, "inference": inference}


def make_question(qm: QuestionMaker, qtype: str) -> Question | None:
    """One question of `qtype` (one of questions.QTYPES), or None when the draw failed."""
    return MAKERS[qtype](qm)

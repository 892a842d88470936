"""Render the world as encyclopedia documents: one per entity, title = entity name.

Each fact of an entity is stated exactly once, in its own document, with a template chosen
by the seeded RNG (sometimes two facts share one sentence); sentences after the opening one
are shuffled and may use a pronoun for the subject. Documents also carry distractor content
that makes retrieval non-trivial without giving away another document's facts: inverse
mentions ("Notable people born in Korvath include ...") and filler sentences.

`render_world(world)` returns `RenderedDoc`s that remember which sentence states which fact,
so questions can cite the exact supporting sentences.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from random import Random

from generators.corpus.ids import doc_id
from generators.corpus.relations import REL
from generators.corpus.templates import TEMPLATES, Template, count_text, subject_noun
from generators.corpus.world import Entity, World, relations_of

INTRO = {"person": "occupation", "city": "country", "country": "official_name", "org": "kind",
         "work": "kind", "event": "kind", "concept": "kind"}
P_COMBINED = 0.35   # chance to state two facts in one sentence when a template allows it
P_PRONOUN = 0.5     # chance a later sentence starts with a pronoun instead of the name
P_MENTION = 0.6     # chance to include each applicable inverse mention
P_FILLER = 0.5


@dataclass
class RenderedDoc:
    entity_id: str
    doc_id: str
    title: str
    text: str
    sentences: list[str]
    fact_sentence: dict[str, str] = field(default_factory=dict)  # relation -> sentence stating it


def _by_kind() -> tuple[list[Template], list[Template], list[Template]]:
    facts, mentions, fillers = [], [], []
    for t in TEMPLATES:
        if not t.rels:
            fillers.append(t)
        elif any(r.startswith("~") for r in t.rels):
            mentions.append(t)
        else:
            facts.append(t)
    return facts, mentions, fillers


FACT_T, MENTION_T, FILLER_T = _by_kind()
_FITTING: dict[tuple, tuple[list[Template], list[Template], list[Template]]] = {}


def fitting(etype: str, subtype: str | None) -> tuple[list[Template], list[Template], list[Template]]:
    """(fact, mention, filler) templates for an entity type/subtype (cached)."""
    key = (etype, subtype)
    if key not in _FITTING:
        _FITTING[key] = tuple([t for t in ts if t.fits(etype, subtype)] for ts in (FACT_T, MENTION_T, FILLER_T))
    return _FITTING[key]


def _values(world: World, e: Entity, rng: Random) -> dict:
    vals = {}
    for rel, v in e.facts.items():
        kind = REL[rel].kind
        if REL[rel].is_entity:
            vals[rel] = world.mention(v)
        elif kind == "count":
            vals[rel] = count_text(v, words=rng.random() < 0.5)
        else:
            vals[rel] = v
    return vals


def _pronouns(e: Entity, rng: Random) -> tuple[str, str]:
    if e.type == "person":
        return ("He", "His") if e.gender == "m" else ("She", "Her")
    if rng.random() < 0.5:
        return "It", "Its"
    noun = subject_noun(e.type, e.subtype)
    return f"The {noun}", f"The {noun}'s"


def render_entity(world: World, e: Entity, rng: Random) -> RenderedDoc:
    vals = _values(world, e, rng)
    fact_t, mention_t, filler_t = fitting(e.type, e.subtype)
    todo = relations_of(e)
    intro_rel = INTRO[e.type]
    intro_t = rng.choice([t for t in fact_t if intro_rel in t.relset and t.relset <= e.facts.keys()])
    planned: list[Template] = []
    done = set(intro_t.relset)
    order = [r for r in todo if r not in done]
    rng.shuffle(order)
    for rel in order:
        if rel in done:
            continue
        left = {r for r in todo if r not in done}
        cands = [t for t in fact_t if rel in t.relset and t.relset <= left]
        multi = [t for t in cands if len(t.rels) > 1]
        single = [t for t in cands if len(t.rels) == 1]
        t = rng.choice(multi if (multi and (rng.random() < P_COMBINED or not single)) else single)
        planned.append(t)
        done.update(t.rels)
    mentions = []
    for t in mention_t:
        inv = t.rels[0]
        subjects = world.inverse.get((inv[1:], e.id), [])
        if subjects and rng.random() < P_MENTION:
            k = min(len(subjects), rng.randint(1, 3))
            vals[inv] = [world.mention(s) for s in rng.sample(subjects, k)]
            mentions.append(t)
    rest = planned + mentions
    if filler_t and rng.random() < P_FILLER:
        rest.append(rng.choice(filler_t))
    rng.shuffle(rest)
    doc_sentences, fact_sentence = [], {}
    for i, t in enumerate([intro_t] + rest):
        pron, poss = (None, None)
        if i > 0 and t.subject_first and rng.random() < P_PRONOUN:
            pron, poss = _pronouns(e, rng)
        s = t.render(world.mention(e.id), vals, pron, poss)
        doc_sentences.append(s)
        for r in t.rels:
            if not r.startswith("~"):
                fact_sentence[r] = s
    text = " ".join(doc_sentences)
    return RenderedDoc(e.id, doc_id(e.name, text), e.name, text, doc_sentences, fact_sentence)


def render_world(world: World, progress=None) -> dict[str, RenderedDoc]:
    """Entity id -> rendered document, deterministic for the world's seed.
    `progress`, if given, is called with the number of documents done since the last call."""
    rng = Random(f"{world.seed}:render")
    docs = {}
    for i, e in enumerate(world.entities):
        docs[e.id] = render_entity(world, e, rng)
        if progress and i % 500 == 499:
            progress(500)
    if progress:
        progress(len(world.entities) % 500)
    return docs

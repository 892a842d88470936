"""Multi-hop questions over the world, each with the relation program that answers it.

Four question types (2WikiMultihopQA-style names):
  bridge         follow 1-3 entity relations, then ask an attribute: 2-4 hops, one golden
                 document per hop ("In what year was the founder of the publisher of X born?")
  comparison     compare a number of two entities, directly or through one relation each
                 ("Who was born first, A or B?"; "Between X and Y, whose author was born earlier?");
                 ties are rejected
  compositional  combine two year facts into a number ("How many years passed between the
                 founding of A and the birth of the founder of A?")
  inference      a rule-defined relation: native country (birthplace -> country), or a yes/no
                 rule (same birth country, same employer, same university, worked for the
                 publisher, same headquarters country, event held in a country)

Bridge, comparison, compositional and native-country questions record in `extra["phrases"]`
how they name every entity they read, by name ("the founder of the publisher of X"; an entity
the question reads without naming it, a compared entity's founder or the birthplace of the
native-country rule, gets "the founder of A" or "the birthplace of X"), which a plan of
lookups copies (generators/synth/think.py).

Every relation is functional, names are unique, and every hop reads a new document, so a
question has exactly one answer. `make_question(QuestionMaker(world, rng), qtype)`
(generators/corpus/inference.py) returns a `Question` or None when the random draw could
not make a valid one (the caller retries).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from random import Random

from generators.corpus.names import capitalise
from generators.corpus.relations import (ASK, COMPARE, NOUN, NP, PRED, REL, WHEN, format_value, pick,
                                         value_aliases, years_aliases)
from generators.corpus.world import Entity, World
from storage.schema import meta_of

QTYPES = ("bridge", "comparison", "compositional", "inference")
HOP_WEIGHTS = {2: 0.4, 3: 0.35, 4: 0.25}
MAX_HOPS = 4
NOT_ASKED = {"kind"}
COMPARE_POOLS = {"birth_year": ["person"], "founded": ["city", "org", "country"], "population": ["city", "country"],
                 "provinces": ["country"], "year": ["work", "event", "concept"], "chapters": ["work/novel"],
                 "tracks": ["work/album"]}


def question_kind(triple: dict) -> str:
    """A triple's kind of question, its type and hop count ("compositional/2"; "other/?" for an
    imported triple without them): what synthesis may take turns over and evaluation reports by."""
    return f"{triple.get('qtype') or 'other'}/{triple.get('hop_count') or '?'}"


def question_ask(triple: dict) -> str:
    """What a triple's question asks of its last page: the relation its answer is ("population",
    "founder"; for the years between two dates, the second date's). "?" when its meta names no
    relation (comparisons and inferences of the world, imported triples)."""
    relations = meta_of(triple).get("relations") or ["?"]
    last = relations[-1]
    while isinstance(last, list):  # a computed answer's relations are two paths
        last = last[-1] if last else "?"
    return str(last)


@dataclass
class Question:
    qtype: str
    question: str
    answer: str
    aliases: list[str]
    steps: list[tuple[str, str]]  # (subject entity id, relation) of every fact the program reads
    program: object
    extra: dict = field(default_factory=dict)

    @property
    def golden(self) -> list[str]:
        """Entity ids of the golden documents, in the order the program reads them."""
        return list(dict.fromkeys(s for s, _ in self.steps))


class QuestionMaker:
    def __init__(self, world: World, rng: Random):
        self.w, self.rng = world, rng
        self.entity_types = [e for e in world.entities if any(REL[r].is_entity for r in e.facts)]
        self._pools: dict[str, list[Entity]] = {}
        self._via: list | None = None
        self.index: dict = {}  # caches for the inference rules

    # -- phrasing ------------------------------------------------------------------------
    def mention(self, e: Entity) -> str:
        """How a question names a start entity, sometimes with a type hint."""
        r = self.rng
        if e.type == "work" and r.random() < 0.7:
            return f"the {e.subtype} {e.name}"
        if e.type == "city" and r.random() < 0.3:
            return f"the city of {e.name}"
        return self.w.mention(e.id)

    def np(self, rel: str, subject: Entity, x: str) -> str:
        return self.rng.choice(pick(NP, rel, subject.subtype, subject.type)).format(x=x)

    def chain_np(self, start: Entity, rels: list[str], said: dict | None = None) -> tuple[str, Entity]:
        """Noun phrase for the entity reached from `start` by entity relations `rels`; `said` gets
        the phrase of every entity on the way, by name (the first one kept), as the question says it."""
        x, cur = self.mention(start), start
        said = {} if said is None else said
        said.setdefault(start.name, x)
        for rel in rels:
            x = self.np(rel, cur, x)
            cur = self.w.by_id[cur.facts[rel]]
            said.setdefault(cur.name, x)
        return x, cur

    def answer_of(self, subject: Entity, rel: str) -> tuple[str, list[str]]:
        v = subject.facts[rel]
        if REL[rel].is_entity:
            return self.entity_answer(self.w.by_id[v])
        return format_value(rel, v), value_aliases(rel, v)

    def entity_answer(self, e: Entity) -> tuple[str, list[str]]:
        aliases = [f"the {e.name}"] if e.article else []
        if e.type == "person":
            aliases.append(e.surname)
        if e.type == "country":
            aliases += value_aliases("country", None, long_name=e.facts["official_name"])
        return e.name, aliases

    # -- walking ---------------------------------------------------------------------------
    def walk(self, start: Entity, rels: list[str]) -> list[tuple[str, str]] | None:
        """Steps for following `rels` from `start` (None if a relation is missing)."""
        steps, cur = [], start
        for rel in rels:
            if rel not in cur.facts:
                return None
            steps.append((cur.id, rel))
            if REL[rel].is_entity:
                cur = self.w.by_id[cur.facts[rel]]
        return steps

    def program_chain(self, steps: list[tuple[str, str]]) -> list:
        return [[self.w.name(steps[0][0]), steps[0][1]]] + [["?", rel] for _, rel in steps[1:]]

    def random_path(self, start: Entity, n: int, avoid: list[str]) -> list[str] | None:
        """`n` entity relations from `start` that never revisit an entity in `avoid`."""
        rels, cur, seen = [], start, list(avoid)
        for _ in range(n):
            opts = [r for r in cur.facts if REL[r].is_entity and cur.facts[r] not in seen]
            if not opts:
                return None
            rel = self.rng.choice(opts)
            rels.append(rel)
            cur = self.w.by_id[cur.facts[rel]]
            seen.append(cur.id)
        return rels

    def reach(self, start: Entity, rels: list[str]) -> Entity:
        """The entity reached from `start` by entity relations `rels`."""
        cur = start
        for rel in rels:
            cur = self.w.by_id[cur.facts[rel]]
        return cur

    def value_at(self, start: Entity, rels: list[str]):
        cur = start
        for rel in rels[:-1]:
            cur = self.w.by_id[cur.facts[rel]]
        return cur, cur.facts[rels[-1]]

    # -- question types (inference: generators/corpus/inference.py) -----------------------
    def bridge(self) -> Question | None:
        r = self.rng
        hops = r.choices(list(HOP_WEIGHTS), weights=list(HOP_WEIGHTS.values()))[0]
        start = r.choice(self.entity_types)
        path = self.random_path(start, hops - 1, [start.id])
        if path is None:
            return None
        said: dict[str, str] = {}
        x, last = self.chain_np(start, path, said)
        visited = [start.id] + [s for s, _ in self.walk(start, path)] + [last.id]
        finals = [rel for rel in last.facts if rel not in NOT_ASKED
                  and not (REL[rel].is_entity and last.facts[rel] in visited)]
        if not finals:
            return None
        rel = r.choice(finals)
        steps = self.walk(start, path + [rel])
        question = capitalise(r.choice(pick(ASK, rel, last.subtype, last.type)).format(x=x))
        answer, aliases = self.answer_of(last, rel)
        return Question("bridge", question, answer, aliases, steps, self.program_chain(steps),
                        {"relations": path + [rel], "phrases": said})

    def _two(self, pool: list[Entity], key, differ=lambda a, b: True) -> tuple[Entity, Entity] | None:
        for _ in range(20):
            a, b = self.rng.sample(pool, 2)
            if key(a) != key(b) and differ(a, b):
                return a, b
        return None

    def pool(self, spec: str) -> list[Entity]:
        """Entities of "type" or "type/subtype" (cached)."""
        if spec not in self._pools:
            etype, _, sub = spec.partition("/")
            self._pools[spec] = [e for e in self.w.by_type.get(etype, []) if not sub or e.subtype == sub]
        return self._pools[spec]

    def via_groups(self) -> list[tuple[str, str, list[Entity]]]:
        """(relation, compared attribute, subjects of one subtype) for "whose <noun> ..." comparisons."""
        if self._via is None:
            groups: dict[tuple, list[Entity]] = {}
            attrs = sorted({a for a, _ in PRED})
            for e in self.entity_types:
                for via in NOUN:
                    if via in e.facts:
                        target = self.w.by_id[e.facts[via]]
                        for attr in attrs:
                            if attr in target.facts:
                                groups.setdefault((via, attr, e.subtype), []).append(e)
            self._via = [(via, attr, es) for (via, attr, _), es in groups.items() if len(es) > 1]
        return self._via

    def comparison(self) -> Question | None:
        r = self.rng
        op = r.choice(["min", "max"])
        if r.random() < 0.6:  # direct: two entities, one number each
            rel = r.choice(list(COMPARE_POOLS))
            pool = self.pool(r.choice(COMPARE_POOLS[rel]))
            pair = self._two(pool, lambda e: e.facts[rel]) if len(pool) > 1 else None
            if pair is None:
                return None
            chains = [[rel], [rel]]
            forms = COMPARE[(rel, op)]
            forms = forms.get(pair[0].type, forms.get("*")) if isinstance(forms, dict) else forms
            form = r.choice(forms)
            said = {e.name: self.mention(e) for e in pair}
            q = form.format(a=said[pair[0].name], b=said[pair[1].name])
        else:  # through one relation each: "whose founder was born earlier"
            via, rel, pool = r.choice(self.via_groups())
            pair = self._two(pool, lambda e: self.w.by_id[e.facts[via]].facts[rel],
                             lambda a, b: len({a.id, b.id, a.facts[via], b.facts[via]}) == 4)
            if pair is None:
                return None
            chains = [[via, rel], [via, rel]]
            noun = pick(NOUN, via, pair[0].subtype, pair[0].type)
            form = r.choice(["Between {a} and {b}, whose {noun} {pred}?", "Of {a} and {b}, which one's {noun} {pred}?"])
            pred = PRED[(rel, op)]
            if REL[via].kind == "country":
                pred = pred.replace("founded", "established")
            said = {e.name: self.mention(e) for e in pair}
            q = form.format(a=said[pair[0].name], b=said[pair[1].name], noun=noun, pred=pred)
            said.update({self.w.by_id[e.facts[via]].name: f"the {noun} of {said[e.name]}" for e in pair})
        values = [self.value_at(e, c)[1] for e, c in zip(pair, chains)]
        winner = pair[values.index((min if op == "min" else max)(values))]
        steps = [s for e, c in zip(pair, chains) for s in self.walk(e, c)]
        answer, aliases = self.entity_answer(winner)
        program = {"op": "arg" + op, "candidates": [
            {"answer": e.name, "chain": self.program_chain(self.walk(e, c))} for e, c in zip(pair, chains)]}
        return Question("comparison", capitalise(q), answer, aliases, steps, program,
                        {"relation": rel, "phrases": said})

    def compositional(self) -> Question | None:
        r = self.rng
        start = r.choice(self.w.entities)
        options = []  # relation paths from start that end in a year
        for n in range(0, 3):
            for _ in range(3):
                path = self.random_path(start, n, [start.id]) if n else []
                if path is None:
                    continue
                last = self.reach(start, path)
                for rel in ("birth_year", "founded", "year"):
                    if rel in last.facts and path + [rel] not in options:
                        options.append(path + [rel])
        if len(options) < 2:
            return None
        a, b = r.sample(options, 2)
        (ea, va), (eb, vb) = self.value_at(start, a), self.value_at(start, b)
        steps = self.walk(start, a) + self.walk(start, b)
        if ea.id == eb.id or va == vb or len(dict.fromkeys(s for s, _ in steps)) > MAX_HOPS:
            return None
        phrases, said = [], {}
        for path, end in ((a, ea), (b, eb)):
            x, _ = self.chain_np(start, path[:-1], said)
            phrases.append(r.choice(pick(WHEN, path[-1], end.subtype, end.type)).format(x=x))
        form = r.choice(["How many years passed between {a} and {b}?", "How many years separate {a} and {b}?",
                         "What is the number of years between {a} and {b}?"])
        n = abs(va - vb)
        program = {"op": "absdiff", "args": [self.program_chain(self.walk(start, a)),
                                             self.program_chain(self.walk(start, b))]}
        return Question("compositional", capitalise(form.format(a=phrases[0], b=phrases[1])), str(n),
                        years_aliases(n), steps, program, {"relations": [a, b], "phrases": said})

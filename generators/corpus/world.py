"""The fictional world: countries, cities, people, organisations, works, events and science
concepts with functional relations, built deterministically from a seed.

Names are made-up syllable words (see names.py), so a model cannot know any fact and must
look it up. Years are kept plausible (an organisation is founded after its founder's birth,
a novel is published after its author's birth, ...).

    from generators.corpus.world import build_world
    w = build_world(seed=7, entities=2000)
    e = w.by_name["Vantria"]; w.name(e.facts["capital"])

Run the whole generator (documents + questions) with `forgeplay corpus world --help`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from random import Random

from generators.corpus.names import NameMaker, takes_article
from generators.corpus.relations import CREATOR_JOBS, GENRES, ORG_KIND, REL, SCIENTISTS, SUBTYPES, VOCAB

SHARE = {"country": 0.03, "city": 0.12, "person": 0.40, "org": 0.14, "work": 0.18, "event": 0.07}
MIN_ENTITIES = 50
ORG_NAMES = {"university": ["University of {W}", "{W} University", "{W} Institute"],
             "publisher": ["{W} Press", "{W} House", "{W} Books"],
             "studio": ["{W} Pictures", "{W} Studios", "{W} Films"],
             "label": ["{W} Records", "{W} Music", "{W} Sound"],
             "company": ["{W} Industries", "{W} Trading Company", "{W} Holdings", "{W} Works"]}
ORG_WEIGHTS = {"university": 0.2, "publisher": 0.2, "studio": 0.15, "label": 0.15, "company": 0.3}
WORK_NAMES = {"novel": (["{N} of {W}", "{W}'s {N}", "{W} {N}", "{N}s of {W}"],
                        ["Lantern", "Orchard", "Harbour", "Letters", "Winter", "Crown", "Garden", "Bridge",
                         "Daughter", "Ledger", "Tide", "Mirror"]),
              "film": (["{N} of {W}", "{W} {N}", "{W}"],
                       ["Sky", "Road", "Storm", "Line", "Heist", "Border", "Signal", "Night", "Affair"]),
              "album": (["{W}", "{N}s of {W}", "{W} {N}"],
                        ["Song", "Hymn", "Wave", "Ballad", "Session", "Night", "Signal"])}
WORK_WEIGHTS = {"novel": 0.45, "film": 0.3, "album": 0.25}
EVENT_NAMES = {"treaty": ["Treaty of {W}", "{W} Accord"], "festival": ["{W} Festival", "Festival of {W}"],
               "expedition": ["{W} Expedition"], "conference": ["{W} Conference", "Congress of {W}"]}
CONCEPT_NAMES = {"principle": ["{W} Principle"], "effect": ["{W} Effect"], "theorem": ["{W} Theorem"],
                 "law": ["Law of {W}", "{W}'s Law"]}
COUNTRY_FORMS = ["Republic of", "Kingdom of", "Federation of", "Commonwealth of", "Union of", "Grand Duchy of"]


@dataclass(slots=True)
class Entity:
    id: str
    type: str
    subtype: str | None
    name: str
    gender: str | None = None
    article: bool = False  # running text says "the <name>"
    surname: str | None = None
    facts: dict = field(default_factory=dict)  # relation -> value (entity id, int or str)


@dataclass
class World:
    seed: int
    entities: list[Entity]
    by_id: dict[str, Entity] = field(init=False)
    by_name: dict[str, Entity] = field(init=False)
    by_type: dict[str, list[Entity]] = field(init=False)
    inverse: dict[tuple[str, str], list[str]] = field(init=False)  # (rel, object id) -> subject ids

    def __post_init__(self) -> None:
        self.by_id = {e.id: e for e in self.entities}
        self.by_name = {e.name: e for e in self.entities}
        if len(self.by_name) != len(self.entities):
            raise ValueError("two entities share a name")
        self.by_type = {}
        self.inverse = {}
        for e in self.entities:
            self.by_type.setdefault(e.type, []).append(e)
            for rel, v in e.facts.items():
                if REL[rel].is_entity:
                    self.inverse.setdefault((rel, v), []).append(e.id)

    def name(self, entity_id: str) -> str:
        return self.by_id[entity_id].name

    def value(self, entity: Entity, rel: str):
        """A relation value as a parser reads it back: entity names for entity relations."""
        v = entity.facts[rel]
        return self.by_id[v].name if REL[rel].is_entity else v

    def mention(self, entity_id: str) -> str:
        """The name as running text says it ("the Osk Festival")."""
        e = self.by_id[entity_id]
        return f"the {e.name}" if e.article else e.name


def _counts(n: int) -> dict[str, int]:
    c = {t: round(n * s) for t, s in SHARE.items()}
    c["country"] = max(3, c["country"])
    c["city"] = max(2 * c["country"], c["city"])
    c["org"] = max(len(ORG_NAMES), c["org"])
    c["work"] = max(len(WORK_NAMES), c["work"])
    c["event"] = max(1, c["event"])
    c["concept"] = n - sum(c.values())
    if c["concept"] < 1:
        raise ValueError(f"need at least {MIN_ENTITIES} entities, got {n}")
    return c


def _subtypes(rng: Random, n: int, weights: dict[str, float]) -> list[str]:
    """At least one of each subtype, the rest drawn by weight."""
    kinds = list(weights)
    return kinds + rng.choices(kinds, weights=list(weights.values()), k=max(0, n - len(kinds)))


def _pick(rng: Random, pool: list[Entity], fallback: list[Entity]) -> Entity:
    return rng.choice(pool or fallback)


def build_world(seed: int, entities: int) -> World:
    """A world with exactly `entities` entities (at least MIN_ENTITIES)."""
    if entities < MIN_ENTITIES:
        raise ValueError(f"need at least {MIN_ENTITIES} entities, got {entities}")
    rng = Random(f"{seed}:world")
    names = NameMaker(Random(f"{seed}:names"))
    n = _counts(entities)
    out: list[Entity] = []

    def add(etype: str, prefix: str, i: int, subtype: str | None, name: str, **kw) -> Entity:
        e = Entity(f"{etype}:{prefix}{i}", etype, subtype, name, article=takes_article(etype, name), **kw)
        out.append(e)
        return e

    countries = [add("country", "K", i, None, names.country()) for i in range(n["country"])]
    for k in countries:
        long_name = f"{rng.choice(COUNTRY_FORMS)} {k.name}"
        names.used.add(long_name)
        k.facts.update(official_name=long_name, founded=rng.randint(1400, 1960),
                       population=rng.randint(200, 90_000) * 1000, provinces=rng.randint(3, 40))
    cities = []
    for i in range(n["city"]):
        c = add("city", "C", i, None, names.place())
        country = countries[i] if i < len(countries) else rng.choice(countries)
        c.facts.update(country=country.id, founded=rng.randint(900, 1900), population=rng.randint(50, 30_000) * 100)
        if i < len(countries):
            country.facts["capital"] = c.id
        cities.append(c)
    people = []
    for i in range(n["person"]):
        gender = rng.choice("mf")
        given, surname = names.person(gender)
        p = add("person", "P", i, None, f"{given} {surname}", gender=gender, surname=surname)
        p.facts.update(occupation=rng.choice(VOCAB["occupation"]), birth_year=rng.randint(1700, 1990),
                       birthplace=rng.choice(cities).id)
        people.append(p)
    older = [p for p in people if p.facts["birth_year"] <= 1960]
    orgs = []
    for i, sub in enumerate(_subtypes(rng, n["org"], ORG_WEIGHTS)):
        o = add("org", "O", i, sub, names.titled(ORG_NAMES[sub]))
        founder = _pick(rng, older, people)
        o.facts.update(kind=ORG_KIND[sub], headquarters=rng.choice(cities).id, founder=founder.id,
                       founded=min(founder.facts["birth_year"] + rng.randint(20, 60), 2020))
        orgs.append(o)
    universities = [o for o in orgs if o.subtype == "university"]
    for p in people:
        p.facts.update(employer=rng.choice(orgs).id, alma_mater=rng.choice(universities).id)
    by_job: dict[str, list[Entity]] = {}
    for p in people:
        if p.facts["birth_year"] <= 1980:
            by_job.setdefault(p.facts["occupation"], []).append(p)
    makers = {sub: [p for job in jobs for p in by_job.get(job, [])] for sub, jobs in CREATOR_JOBS.items()}
    houses = {sub: [o for o in orgs if o.subtype == kind]
              for sub, kind in {"novel": "publisher", "film": "studio", "album": "label"}.items()}
    for i, sub in enumerate(_subtypes(rng, n["work"], WORK_WEIGHTS)):
        patterns, nouns = WORK_NAMES[sub]
        w = add("work", "W", i, sub, names.titled(patterns, nouns))
        creator = _pick(rng, makers[sub], people)
        w.facts.update(kind=sub, genre=rng.choice(GENRES[sub]), creator=creator.id,
                       publisher=rng.choice(houses[sub]).id,
                       year=min(creator.facts["birth_year"] + rng.randint(18, 70), 2024))
        if sub == "novel":
            w.facts["chapters"] = rng.randint(5, 60)
        elif sub == "album":
            w.facts["tracks"] = rng.randint(4, 24)
    for i, sub in enumerate(_subtypes(rng, n["event"], {k: 1.0 for k in EVENT_NAMES})[:n["event"]]):
        ev = add("event", "E", i, sub, names.titled(EVENT_NAMES[sub]))
        ev.facts.update(kind=sub, location=rng.choice(cities).id, year=rng.randint(1750, 2020),
                        organiser=rng.choice(orgs).id)
    scientists = [p for job in SCIENTISTS for p in by_job.get(job, [])]
    for i, sub in enumerate(_subtypes(rng, n["concept"], {k: 1.0 for k in CONCEPT_NAMES})[:n["concept"]]):
        k = add("concept", "Q", i, sub, names.titled(CONCEPT_NAMES[sub]))
        who = _pick(rng, scientists, people)
        k.facts.update(kind=sub, field=rng.choice(VOCAB["field"]), discoverer=who.id,
                       year=min(who.facts["birth_year"] + rng.randint(20, 60), 2020))
    return World(seed, out)


def relations_of(e: Entity) -> list[str]:
    """The entity's relations in a fixed order (the order of REL)."""
    return [r for r in REL if r in e.facts]


SUBTYPE_OF = {s: t for t, subs in SUBTYPES.items() for s in subs}

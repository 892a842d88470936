"""The world's vocabulary: entity types, relations and how questions phrase them.

Every relation is functional (one value per subject). `REL[name].kind` says what a value is:
an entity type ("city", "person", ...), "year", "number" (a population, written with
commas), "count" (a small number, written as digits or words) or "literal" (a word from
`VOCAB[name]`). Relations whose name starts with "~" are inverse mentions ("Notable
people born in X include A and B"): distractor content, many-valued, never used by a
question program.

Phrase tables map a relation to templates keyed by the subject's subtype ("*" = any);
`{x}` is the noun phrase of the subject.
"""

from __future__ import annotations

from dataclasses import dataclass

from generators.corpus.names import number_word

TYPES = ("country", "city", "person", "org", "work", "event", "concept")
SUBTYPES = {
    "org": ("university", "publisher", "studio", "label", "company"),
    "work": ("novel", "film", "album"),
    "event": ("treaty", "festival", "expedition", "conference"),
    "concept": ("principle", "effect", "theorem", "law"),
}
ORG_KIND = {"university": "university", "publisher": "publishing house", "studio": "film studio",
            "label": "record label", "company": "trading company"}

VOCAB = {
    "occupation": ["chemist", "painter", "physicist", "novelist", "architect", "engineer", "historian",
                   "composer", "astronomer", "economist", "geologist", "diplomat", "sculptor",
                   "mathematician", "botanist", "poet", "surgeon", "merchant", "film director",
                   "singer", "explorer", "philosopher", "journalist"],
    "genre": ["historical", "adventure", "mystery", "romance", "satirical", "gothic", "drama", "comedy",
              "western", "documentary", "thriller", "musical", "folk", "jazz", "orchestral", "ambient",
              "choral"],
    "field": ["physics", "chemistry", "astronomy", "geology", "mathematics", "biology", "economics"],
    "kind": sorted(set(ORG_KIND.values()) | set(SUBTYPES["work"]) | set(SUBTYPES["event"])
                   | set(SUBTYPES["concept"])),
}
GENRES = {"novel": VOCAB["genre"][:6], "film": VOCAB["genre"][6:12], "album": VOCAB["genre"][12:]}
CREATOR_JOBS = {"novel": ["novelist", "poet", "historian", "journalist", "philosopher"],
                "film": ["film director"], "album": ["composer", "singer"]}
SCIENTISTS = ["chemist", "physicist", "astronomer", "economist", "geologist", "mathematician", "botanist"]


@dataclass(frozen=True)
class Rel:
    name: str
    kind: str                 # entity type, "year", "number", "count" or "literal"
    subjects: tuple[str, ...]  # entity types (or "type/subtype") that carry it

    @property
    def is_entity(self) -> bool:
        return self.kind in TYPES


REL = {r.name: r for r in [
    Rel("official_name", "literal_name", ("country",)),
    Rel("capital", "city", ("country",)),
    Rel("founded", "year", ("country", "city", "org")),
    Rel("population", "number", ("country", "city")),
    Rel("provinces", "count", ("country",)),
    Rel("country", "country", ("city",)),
    Rel("occupation", "literal", ("person",)),
    Rel("birth_year", "year", ("person",)),
    Rel("birthplace", "city", ("person",)),
    Rel("employer", "org", ("person",)),
    Rel("alma_mater", "org", ("person",)),
    Rel("kind", "literal", ("org", "work", "event", "concept")),
    Rel("headquarters", "city", ("org",)),
    Rel("founder", "person", ("org",)),
    Rel("creator", "person", ("work",)),
    Rel("publisher", "org", ("work",)),
    Rel("year", "year", ("work", "event", "concept")),
    Rel("genre", "literal", ("work",)),
    Rel("chapters", "count", ("work/novel",)),
    Rel("tracks", "count", ("work/album",)),
    Rel("location", "city", ("event",)),
    Rel("organiser", "org", ("event",)),
    Rel("field", "literal", ("concept",)),
    Rel("discoverer", "person", ("concept",)),
]}
INVERSE = {"~birthplace": "person", "~headquarters": "org", "~location": "event", "~country": "city",
           "~founder": "org", "~creator": "work", "~discoverer": "concept", "~employer": "person",
           "~publisher": "work", "~alma_mater": "person", "~organiser": "event"}
COMPARABLE = ("birth_year", "founded", "population", "provinces", "year", "chapters", "tracks")


def value_kind(rel: str) -> str:
    return "list" if rel.startswith("~") else REL[rel].kind


def format_value(rel: str, value) -> str:
    """The canonical answer string of a relation value."""
    kind = REL[rel].kind
    if kind == "number":
        return f"{value:,}"
    return str(value)


def value_aliases(rel: str, value, surname: str | None = None, long_name: str | None = None) -> list[str]:
    """Other accepted spellings of a value (the canonical one is not repeated)."""
    kind = REL[rel].kind
    if kind == "year":
        return [f"in {value}"]
    if kind == "number":
        return [str(value)]
    if kind == "count":
        w = number_word(value)
        return [w] if w else []
    if kind == "literal_name":
        return [f"the {value}"]
    if kind == "person" and surname:
        return [surname]
    if kind == "country" and long_name:
        return [long_name, f"the {long_name}"]
    return []


def years_aliases(n: int) -> list[str]:
    out = [f"{n} years" if n != 1 else "1 year"]
    w = number_word(n)
    if w:
        out += [w, f"{w} years" if n != 1 else "one year"]
    return out


def pick(table: dict, rel: str, *keys: str | None):
    """The entry of `rel` for the first of `keys` (subtype, type) it has, else its "*" entry."""
    entry = table[rel]
    if isinstance(entry, dict):
        for k in keys:
            if k in entry:
                return entry[k]
        return entry["*"]
    return entry


NP = {  # noun phrase for "the <rel> of {x}"; keyed by the subject's subtype
    "capital": ["the capital of {x}", "the capital city of {x}"],
    "country": ["the country in which {x} lies", "the country that contains {x}"],
    "birthplace": ["the birthplace of {x}", "the city where {x} was born"],
    "employer": ["the employer of {x}", "the organisation that employed {x}"],
    "alma_mater": ["the alma mater of {x}", "the university where {x} studied"],
    "headquarters": ["the city where {x} is headquartered", "the home city of {x}"],
    "founder": ["the founder of {x}", "the person who founded {x}"],
    "creator": {"novel": ["the author of {x}", "the writer of {x}"], "film": ["the director of {x}"],
                "album": ["the artist who recorded {x}"], "*": ["the creator of {x}"]},
    "publisher": {"novel": ["the publisher of {x}", "the company that published {x}"],
                  "film": ["the studio that produced {x}"], "album": ["the label that released {x}"],
                  "*": ["the publisher of {x}"]},
    "location": {"treaty": ["the city where {x} was signed"],
                 "expedition": ["the city from which {x} set out"],
                 "*": ["the city where {x} took place", "the host city of {x}"]},
    "organiser": ["the organiser of {x}", "the organisation that organised {x}"],
    "discoverer": ["the discoverer of {x}", "the person who first described {x}"],
}
NOUN = {  # short noun for "whose <noun> ..." comparisons
    "capital": "capital", "country": "country", "birthplace": "birthplace", "employer": "employer",
    "alma_mater": "alma mater", "headquarters": "home city", "founder": "founder",
    "creator": {"novel": "author", "film": "director", "album": "performer", "*": "creator"},
    "publisher": {"novel": "publisher", "film": "studio", "album": "label", "*": "publisher"},
    "location": "host city", "organiser": "organiser", "discoverer": "discoverer",
}
ASK = {
    "official_name": ["What is the official name of {x}?"],
    "capital": ["What is the capital of {x}?", "Which city is the capital of {x}?"],
    "founded": {"country": ["In what year was {x} established?", "When was {x} established?"],
                "*": ["In what year was {x} founded?", "When was {x} founded?"]},
    "population": ["What is the population of {x}?", "How many people live in {x}?"],
    "provinces": ["How many provinces does {x} have?", "Into how many provinces is {x} divided?"],
    "country": ["In which country is {x} located?", "Which country is {x} in?"],
    "occupation": ["What was the occupation of {x}?", "What did {x} do for a living?"],
    "birth_year": ["In what year was {x} born?", "When was {x} born?"],
    "birthplace": ["Where was {x} born?", "In which city was {x} born?"],
    "employer": ["Which organisation did {x} work for?", "Who employed {x}?"],
    "alma_mater": ["Where did {x} study?", "Which university did {x} attend?"],
    "headquarters": ["Where is {x} based?", "In which city is {x} headquartered?"],
    "founder": ["Who founded {x}?", "Who was the founder of {x}?"],
    "creator": {"novel": ["Who wrote {x}?"], "film": ["Who directed {x}?"], "album": ["Who recorded {x}?"],
                "*": ["Who created {x}?"]},
    "publisher": {"novel": ["Who published {x}?"], "film": ["Which studio produced {x}?"],
                  "album": ["Which label released {x}?"], "*": ["Who published {x}?"]},
    "year": {"novel": ["In what year was {x} published?"], "film": ["In what year was {x} released?"],
             "album": ["In what year was {x} released?"], "treaty": ["In what year was {x} signed?"],
             "principle": ["In what year was {x} first described?"],
             "effect": ["In what year was {x} first described?"],
             "theorem": ["In what year was {x} first described?"],
             "law": ["In what year was {x} first described?"],
             "*": ["In what year did {x} take place?"]},
    "genre": ["What genre is {x}?", "To which genre does {x} belong?"],
    "chapters": ["How many chapters does {x} have?"],
    "tracks": ["How many tracks are on {x}?"],
    "location": {"treaty": ["Where was {x} signed?"], "expedition": ["From which city did {x} set out?"],
                 "*": ["Where did {x} take place?", "In which city did {x} take place?"]},
    "organiser": ["Who organised {x}?"],
    "field": ["To which field of science does {x} belong?", "In which field was {x} described?"],
    "discoverer": ["Who first described {x}?"],
}
WHEN = {  # "the <event> of {x}" for a year relation, for "how many years between" questions
    "birth_year": ["the birth of {x}"],
    "founded": {"country": ["the establishment of {x}"], "*": ["the founding of {x}"]},
    "year": {"novel": ["the publication of {x}"], "film": ["the release of {x}"], "album": ["the release of {x}"],
             "treaty": ["the signing of {x}"], "festival": ["the staging of {x}"],
             "expedition": ["the departure of {x}"], "conference": ["the convening of {x}"],
             "*": ["the first description of {x}"]},
}
COMPARE = {  # (rel, op) -> direct comparison questions of {a} and {b} (by type where it matters)
    ("birth_year", "min"): ["Who was born first, {a} or {b}?", "Who is older, {a} or {b}?"],
    ("birth_year", "max"): ["Who was born later, {a} or {b}?", "Who is younger, {a} or {b}?"],
    ("founded", "min"): {"country": ["Which was established earlier, {a} or {b}?"],
                         "*": ["Which was founded earlier, {a} or {b}?"]},
    ("founded", "max"): {"country": ["Which was established more recently, {a} or {b}?"],
                         "*": ["Which was founded more recently, {a} or {b}?"]},
    ("population", "max"): ["Which has the larger population, {a} or {b}?"],
    ("population", "min"): ["Which has fewer inhabitants, {a} or {b}?"],
    ("provinces", "max"): ["Which country has more provinces, {a} or {b}?"],
    ("provinces", "min"): ["Which country has fewer provinces, {a} or {b}?"],
    ("year", "min"): {"work": ["Which came out first, {a} or {b}?", "Which is older, {a} or {b}?"],
                      "event": ["Which took place first, {a} or {b}?", "Which happened earlier, {a} or {b}?"],
                      "*": ["Which was described first, {a} or {b}?"]},
    ("year", "max"): {"work": ["Which came out later, {a} or {b}?", "Which is more recent, {a} or {b}?"],
                      "event": ["Which took place later, {a} or {b}?", "Which happened more recently, {a} or {b}?"],
                      "*": ["Which was described more recently, {a} or {b}?"]},
    ("chapters", "max"): ["Which novel has more chapters, {a} or {b}?"],
    ("chapters", "min"): ["Which novel has fewer chapters, {a} or {b}?"],
    ("tracks", "max"): ["Which album has more tracks, {a} or {b}?"],
    ("tracks", "min"): ["Which album has fewer tracks, {a} or {b}?"],
}
PRED = {  # (rel, op) -> predicate for "whose <noun> <pred>"
    ("birth_year", "min"): "was born earlier", ("birth_year", "max"): "was born later",
    ("founded", "min"): "was founded earlier", ("founded", "max"): "was founded more recently",
    ("population", "max"): "has the larger population", ("population", "min"): "has the smaller population",
    ("provinces", "max"): "has more provinces", ("provinces", "min"): "has fewer provinces",
}

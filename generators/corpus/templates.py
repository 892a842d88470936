"""Sentence templates of the world encyclopedia, shared by the renderer and the parser.

A template is a sentence with slots: `{s}` the subject (its name, or at the start of a
sentence a pronoun such as "She" or "The city"), `{S}` the subject's possessive ("Korvath's",
"Its"), `{rel}` a relation value, `{a:rel}` a value with its article ("an astronomer"),
`{list:~rel}` an inverse mention list ("A, B and C"). `Template.render` fills the slots;
`Template.regex` is the compiled pattern that `derive.extract_facts` uses to read the same
facts back. A template with several relation slots states several facts in one sentence.
Templates without relation slots are filler (they carry no fact).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

from generators.corpus.names import NAME_PATTERN, ARTICLE, WORD_NUMBERS, capitalise, number_word, with_article
from generators.corpus.relations import ORG_KIND, REL, SUBTYPES, VOCAB, value_kind

SLOT_RE = re.compile(r"\{(s|S|a:[\w~]+|list:[\w~]+|[\w~]+)\}")

PRONOUN_NOUNS = sorted({"city", "country", *ORG_KIND.keys(), *SUBTYPES["work"], *SUBTYPES["event"],
                        *SUBTYPES["concept"]})
PRONOUNS = {"He", "She", "It", *(f"The {n}" for n in PRONOUN_NOUNS)}
POSSESSIVES = {"His", "Her", "Its", *(f"The {n}'s" for n in PRONOUN_NOUNS)}


def _alt(words) -> str:
    return "(?:" + "|".join(re.escape(w) for w in sorted(words, key=lambda w: (-len(w), w))) + ")"


_VALUE = {"year": r"\d{3,4}", "number": r"\d{1,3}(?:,\d{3})*", "count": r"(?:\d+|" + "|".join(
              sorted(WORD_NUMBERS, key=lambda w: (-len(w), w))) + ")",
          "list": rf"(?:the )?{NAME_PATTERN}(?:, (?:the )?{NAME_PATTERN})*(?: and (?:the )?{NAME_PATTERN})?"}


def value_pattern(rel: str) -> str:
    kind = value_kind(rel)
    if kind in _VALUE:
        return _VALUE[kind]
    if kind == "literal":
        return _alt(VOCAB[rel])
    if kind == "literal_name":
        return NAME_PATTERN
    return f"(?:the )?{NAME_PATTERN}"  # entity names, with the article some of them take


def possessive_of(name: str) -> str:
    """"Korvath's", but "Kudrur Studios'"."""
    return name + ("'" if name.endswith("s") else "'s")


def subject_noun(etype: str, subtype: str | None) -> str:
    return subtype if etype in ("org", "work", "event", "concept") else etype


@dataclass(frozen=True)
class Template:
    """One sentence template; `applies` lists "type" or "type/subtype" keys."""

    text: str
    applies: tuple[str, ...]
    slots: tuple[str, ...] = field(init=False)
    rels: tuple[str, ...] = field(init=False)      # relations stated, in slot order
    relset: frozenset = field(init=False)

    def __post_init__(self) -> None:
        slots = tuple(SLOT_RE.findall(self.text))
        rels = tuple(s.split(":", 1)[-1] for s in slots if s not in ("s", "S"))
        object.__setattr__(self, "slots", slots)
        object.__setattr__(self, "rels", rels)
        object.__setattr__(self, "relset", frozenset(rels))

    @property
    def subject_first(self) -> bool:
        return self.text.startswith("{s}") or self.text.startswith("{S}")

    def fits(self, etype: str, subtype: str | None) -> bool:
        return etype in self.applies or f"{etype}/{subtype}" in self.applies

    def render(self, subject: str, values: dict, pronoun: str | None = None,
               possessive: str | None = None) -> str:
        """Fill the slots. `pronoun`/`possessive` replace the subject when the sentence
        starts with it. List values are lists of names; counts may be words (str)."""
        def fill(m: re.Match) -> str:
            slot = m.group(1)
            if slot == "s":
                return pronoun if (pronoun and m.start() == 0) else subject
            if slot == "S":
                return possessive if (possessive and m.start() == 0) else possessive_of(subject)
            if slot.startswith("a:"):
                return with_article(str(values[slot[2:]]))
            if slot.startswith("list:"):
                items = values[slot[5:]]
                return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
            v = values[slot]
            if value_kind(slot) == "number":
                return f"{v:,}"
            return str(v)
        return capitalise(SLOT_RE.sub(fill, self.text))

    @cached_property
    def key(self) -> str:
        """The longest literal piece, for a fast `in` pre-check before the regex."""
        return max(SLOT_RE.split(self.text)[::2], key=len).strip() or self.text

    @cached_property
    def compiled(self) -> tuple[re.Pattern, dict[str, str]]:
        """(anchored regex, {group name: relation}) for parsing rendered sentences."""
        parts, pos = [], 0
        groups: dict[str, str] = {}
        for i, m in enumerate(SLOT_RE.finditer(self.text)):
            parts.append(re.escape(self.text[pos:m.start()]))
            pos = m.end()
            slot = m.group(1)
            if slot == "s":
                parts.append(f"(?P<s>{_alt(PRONOUNS)}|{ARTICLE}{NAME_PATTERN})")
            elif slot == "S":
                parts.append(f"(?:(?P<S>{ARTICLE}{NAME_PATTERN})(?:'s|(?<=s)')|(?P<Sp>{_alt(POSSESSIVES)}))")
            else:
                rel = slot.split(":", 1)[-1]
                groups[f"g{i}"] = rel
                pat = f"(?P<g{i}>{value_pattern(rel)})"
                parts.append(r"(?:a|an) " + pat if slot.startswith("a:") else pat)
        parts.append(re.escape(self.text[pos:]))
        return re.compile("^" + "".join(parts) + "$"), groups


def count_text(n: int, words: bool) -> str:
    w = number_word(n)
    return w if (words and w) else str(n)


def _t(applies: str, *texts: str) -> list[Template]:
    keys = tuple(applies.split())
    return [Template(t, keys) for t in texts]


TEMPLATES: list[Template] = [
    # people
    *_t("person", "{s} was {a:occupation}.", "{s} worked as {a:occupation}.",
        "{s} is remembered as {a:occupation}.", "{s} was born in {birth_year}.",
        "{S} year of birth was {birth_year}.", "{s} was born in {birthplace}.",
        "{S} birthplace was {birthplace}.", "{s} was born in {birthplace} in {birth_year}.",
        "In {birth_year}, {s} was born in {birthplace}.", "{s} worked for {employer}.",
        "{s} was employed by {employer}.", "{S} employer was {employer}.", "{s} studied at {alma_mater}.",
        "{s} was educated at {alma_mater}.", "{s} graduated from {alma_mater}.",
        "{s} studied at {alma_mater} and later worked for {employer}.",
        "Works by {s} include {list:~creator}.", "{s} founded {list:~founder}.",
        "{s} is credited with describing {list:~discoverer}.",
        "{s} is the subject of several later biographies.", "Little else is recorded about {s}."),
    # places
    *_t("city", "{s} is a city in {country}.", "{s} is a city located in {country}.", "{s} lies in {country}.",
        "{S} founding dates to {founded}.", "{s} was established as a settlement in {founded}.",
        "Notable people born in {s} include {list:~birthplace}.",
        "Organisations based in {s} include {list:~headquarters}.", "{s} hosted {list:~location}.",
        "{s} was founded in {founded} and has a population of {population}.",
        "{s} is known for its old market streets."),
    *_t("city org", "{s} was founded in {founded}."),
    *_t("city country", "{s} has a population of {population}.", "{S} population is {population}.",
        "As of the last census, {population} people lived in {s}."),
    *_t("country", "{s}, officially the {official_name}, is a country.",
        "{s} is a country whose official name is the {official_name}.",
        "The {official_name}, commonly called {s}, is a sovereign state.",
        "{S} capital is {capital}.", "The capital of {s} is {capital}.",
        "{s} is governed from its capital, {capital}.", "{s} was established in {founded}.",
        "{s} became independent in {founded}.", "{s} is divided into {provinces} provinces.",
        "{s} has {provinces} provinces.", "Cities in {s} include {list:~country}.",
        "The history of {s} is recorded in many chronicles."),
    # organisations
    *_t("org", "{s} is {a:kind}.", "{s} is {a:kind} based in {headquarters}.", "{s} is based in {headquarters}.",
        "{S} headquarters are in {headquarters}.", "{s} has its headquarters in {headquarters}.",
        "{s} was founded in {founded} by {founder}.", "{s} was founded by {founder}.",
        "{S} founder was {founder}.", "{s} was set up in {founded}.", "{S} staff have included {list:~employer}.",
        "{s} organised {list:~organiser}.", "{s} has changed owners several times."),
    *_t("org/publisher org/studio org/label", "{S} catalogue includes {list:~publisher}."),
    *_t("org/university", "{S} alumni include {list:~alma_mater}."),
    # works
    *_t("work", "{s} is {a:kind}.", "{s} is {a:kind} by {creator}.", "{s} is {a:genre} {kind}.",
        "{s} belongs to the {genre} genre.", "{S} genre is {genre}.", "{s} was well received on release."),
    *_t("work/novel", "{s} was written by {creator}.", "{S} author is {creator}.",
        "{s} was published by {publisher}.", "{s} was published in {year}.", "{s} first appeared in {year}.",
        "{s} was published by {publisher} in {year}.", "{s} has {chapters} chapters.",
        "{s} is divided into {chapters} chapters."),
    *_t("work/film", "{s} was directed by {creator}.", "{S} director is {creator}.", "{s} was produced by {publisher}.",
        "{s} was released in {year}.", "{s} premiered in {year}.", "{s} was produced by {publisher} in {year}."),
    *_t("work/album", "{s} was recorded by {creator}.", "{s} was released by {publisher}.",
        "{s} was released in {year}.", "{s} was released by {publisher} in {year}.", "{s} contains {tracks} tracks.",
        "{s} has {tracks} tracks."),
    # events
    *_t("event", "{s} was {a:kind}.", "{s} took place in {location}.", "The location of {s} was {location}.",
        "{s} took place in {year}.", "{s} took place in {location} in {year}.", "{s} was organised by {organiser}.",
        "{S} organiser was {organiser}.", "Accounts of {s} vary in their details."),
    *_t("event/treaty", "{s} was signed in {location}.", "{s} was signed in {year}."),
    *_t("event/festival event/conference", "{s} was held in {location}."),
    *_t("event/expedition", "{s} set out from {location}."),
    # science concepts
    *_t("concept", "{s} is {a:kind} in {field}.", "{s} belongs to the field of {field}.",
        "{s} was first described by {discoverer}.", "{s} was discovered by {discoverer}.",
        "{S} discoverer was {discoverer}.", "{s} was formulated by {discoverer} in {year}.",
        "{s} was first described in {year}.", "{s} dates from {year}.",
        "{s} is still taught in introductory courses."),
]

assert all(r in REL or r.startswith("~") for t in TEMPLATES for r in t.rels), "unknown relation in a template"

"""The base search tools as data, and the `tools` row format every tool (base or variant) has.

Each domain (person, place, organisation, work, event, science, plus one general search)
has one base tool: a name, a description and a JSON Schema (Draft 2020-12) for its
parameters, with `query` always required and `additionalProperties: false`. The bank
(generators.tools.bank) adds paraphrased variants of these (generators.tools.variants),
accepted by generators.tools.gating.

    from generators.tools.base import BASE_TOOLS, base_rows, to_openai
    rows = base_rows()                                   # one `tools` row per base tool
    to_openai(rows[0])                                   # {"type": "function", "function": {...}}

Rows fit storage/schemas/tools.json (tool_id, domain, name, description, json_schema as a
JSON string, variant_of, meta as a JSON string).
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

DOMAINS = ("person", "place", "organisation", "work", "event", "science", "general")
GENERAL = "general"

# Which document entity types (documents.meta["entity_type"]) each domain tool searches.
# The general tool searches everything; documents without a known type are visible to all.
DOMAIN_ENTITY_TYPES: dict[str, tuple[str, ...]] = {d: (d,) for d in DOMAINS if d != GENERAL}
ENTITY_TYPE_ALIASES = {"organization": "organisation", "people": "person", "location": "place",
                       "creative_work": "work", "concept": "science",
                       # the world corpus's entity types (documents.meta["type"])
                       "city": "place", "country": "place", "org": "organisation"}

LANGUAGES = ["en", "de", "fr", "es", "it", "zh", "ja", "other"]


def _query(example: str) -> dict:
    return {"type": "string", "minLength": 1, "description": f"What to search for, e.g. {example}"}


TOP_K = {"type": "integer", "minimum": 1, "maximum": 10, "description": "Maximum number of results to return (1-10)."}
YEAR = {"type": "integer", "minimum": -3000, "maximum": 2100, "description": "Restrict to a year (negative for BCE)."}
COUNTRY = {"type": "string", "minLength": 1, "description": "Restrict to a country, by name."}
LANGUAGE = {"type": "string", "enum": LANGUAGES, "description": "Language of the source text (ISO 639-1 code)."}


@dataclass(frozen=True)
class BaseTool:
    """One base tool as data."""

    domain: str = field(metadata={"help": "domain key; also the document entity type it searches"})
    name: str = field(metadata={"help": "function name shown to the model"})
    description: str = field(metadata={"help": "what the tool does, in one or two sentences"})
    properties: dict = field(metadata={"help": "JSON Schema properties; `query` is always present"})

    def parameters(self) -> dict:
        return {"type": "object", "properties": copy.deepcopy(self.properties),
                "required": ["query"], "additionalProperties": False}


BASE_TOOLS: tuple[BaseTool, ...] = (
    BaseTool("person", "search_person",
             "Search an encyclopedia of people and return biographical passages about a person, "
             "such as birth date and birthplace, family, education, career and achievements.",
             {"query": _query("'Ada Lovelace birthplace'"), "top_k": TOP_K,
              "nationality": {"type": "string", "minLength": 1, "description": "Nationality of the person."},
              "occupation": {"type": "string", "minLength": 1, "description": "Occupation of the person, e.g. 'painter'."}}),
    BaseTool("place", "search_place",
             "Search a geographic gazetteer and return passages about a place such as a city, region, "
             "river or mountain: location, country, population, founding and landmarks.",
             {"query": _query("'capital of Portugal'"), "top_k": TOP_K, "country": COUNTRY,
              "place_type": {"type": "string", "enum": ["city", "town", "village", "region", "country",
                                                        "river", "mountain", "lake", "other"],
                             "description": "Kind of place."}}),
    BaseTool("organisation", "search_organisation",
             "Search a directory of organisations and return passages about a company, university, band, "
             "team or agency: founders, founding year, headquarters, members and activities.",
             {"query": _query("'founder of the Acme Company'"), "top_k": TOP_K, "country": COUNTRY,
              "founded_year": {"type": "integer", "minimum": 0, "maximum": 2100, "description": "Year the organisation was founded."},
              "org_type": {"type": "string", "enum": ["company", "university", "band", "team", "government",
                                                      "nonprofit", "other"], "description": "Kind of organisation."}}),
    BaseTool("work", "search_creative_work",
             "Search a catalogue of creative works and return passages about a book, film, album, song, "
             "painting or game: its creator, release date, publisher, genre and reception.",
             {"query": _query("'author of The Silent Harbour'"), "top_k": TOP_K, "year": YEAR, "language": LANGUAGE,
              "work_type": {"type": "string", "enum": ["book", "film", "album", "song", "painting", "game",
                                                       "play", "other"], "description": "Kind of work."}}),
    BaseTool("event", "search_event",
             "Search a chronicle of historical events and return passages about a battle, treaty, election, "
             "festival or disaster: when and where it happened, who took part and what followed.",
             {"query": _query("'year the Treaty of Velen was signed'"), "top_k": TOP_K, "year": YEAR, "country": COUNTRY}),
    BaseTool("science", "search_science",
             "Search a scientific reference and return passages about a concept, discovery, species or "
             "theory: its definition, who discovered it, when, and related findings.",
             {"query": _query("'discoverer of the Kessler effect'"), "top_k": TOP_K,
              "field": {"type": "string", "enum": ["physics", "chemistry", "biology", "medicine", "mathematics",
                                                   "astronomy", "earth_science", "computer_science", "other"],
                        "description": "Scientific field."}}),
    BaseTool("general", "general_search",
             "General web search over all available documents; use it when no specialised tool fits "
             "or a specialised search found nothing. Returns the best matching passages.",
             {"query": _query("'when did the Orvane river flood'"), "top_k": TOP_K, "language": LANGUAGE}),
)

BASE_BY_DOMAIN: dict[str, BaseTool] = {t.domain: t for t in BASE_TOOLS}


def canonical(obj: Any) -> str:
    """Canonical JSON (sorted keys, no spaces) used for hashing and seeding."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def tool_id(domain: str, name: str, description: str, parameters: dict) -> str:
    """Stable content hash of a tool definition (16 hex chars)."""
    payload = canonical({"domain": domain, "name": name, "description": description, "parameters": parameters})
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def make_row(domain: str, name: str, description: str, parameters: dict,
             variant_of: str | None = None, meta: dict | None = None) -> dict:
    """A `tools` row (json_schema and meta as JSON strings)."""
    return {"tool_id": tool_id(domain, name, description, parameters), "domain": domain, "name": name,
            "description": description, "json_schema": json.dumps(parameters, ensure_ascii=False),
            "variant_of": variant_of, "meta": json.dumps(meta or {}, sort_keys=True, ensure_ascii=False)}


def base_rows() -> list[dict]:
    """One row per base tool, in DOMAINS order."""
    return [make_row(t.domain, t.name, t.description, t.parameters(), None,
                     {"base": True, "entity_types": list(DOMAIN_ENTITY_TYPES.get(t.domain, ()))})
            for t in BASE_TOOLS]


def parameters_of(row: dict) -> dict:
    """The parameters schema of a row (json_schema may be a string or a dict)."""
    s = row.get("json_schema") if "json_schema" in row else row.get("parameters")
    return json.loads(s) if isinstance(s, str) else dict(s or {})


def to_openai(row: dict) -> dict:
    """OpenAI / Qwen function-tool form: {"type": "function", "function": {name, description, parameters}}."""
    return {"type": "function", "function": {"name": row["name"], "description": row["description"],
                                             "parameters": parameters_of(row)}}

"""Synonym and frame tables for rule paraphrases of the base tools (data only).

`generators.tools.variants` picks from these with a seeded RNG: a name from verb/noun/suffix
parts, a description from a frame filled with domain phrases and a shuffled subset of the
domain's facets, and parameter descriptions from PARAM_PHRASES. Edit the tables to widen
the variety; the gate keeps only paraphrases with the same meaning.
"""

from __future__ import annotations

VERBS_IMPERATIVE = ["search", "find", "lookup", "query", "retrieve", "fetch", "get", "explore"]
VERBS_AGENT = ["finder", "lookup", "search", "explorer", "locator", "retriever", "directory", "index"]

SHARED = {
    "verb": ["search", "look up", "query", "consult", "browse", "scan"],
    "verbs": ["searches", "looks up", "queries", "consults", "browses", "scans"],
    "result": ["passages", "text excerpts", "short entries", "snippets", "reference entries", "matching articles"],
    "about": ["about", "on", "concerning", "describing"],
    "name_suffix": ["info", "records", "details", "facts", "data", "entries"],
}

FRAMES = {
    "default": [
        "{verb} {object} and get {result} {about} {subject}, covering {coverage}.",
        "use this tool to {verb} {object}; it returns {result} {about} {subject}, including {coverage}.",
        "{verbs} {object} for {subject} and returns {result} on {coverage}.",
        "returns {result} {about} {subject} drawn from {object}, e.g. {coverage}.",
        "tool that {verbs} {object}. Results are {result} {about} {subject}: {coverage}.",
    ],
    "general": [
        "general-purpose web search that {verbs} {object} on {subject} and returns the best matching {result}. Use it {coverage}.",
        "broad web search: {verb} {object} for {subject}. Meant to be used {coverage}.",
        "use this general search to {verb} {object} about {subject}, {coverage}; it gives back the top {result}.",
        "catch-all search that {verbs} {object} for {subject} and returns the closest {result}; good {coverage}.",
    ],
}

DOMAIN_PHRASES: dict[str, dict] = {
    "person": {
        "name_nouns": ["person", "people", "biography", "individual", "notable_person", "figure", "life_story"],
        "object": ["an encyclopedia of people", "a biographical reference", "a directory of notable individuals",
                   "a database of life stories"],
        "subject": ["a person", "an individual", "someone", "a notable figure"],
        "facets": [["birth date and birthplace", "when and where they were born", "origins and date of birth"],
                   ["family", "relatives", "parents, spouse and children"],
                   ["education", "schooling", "studies and degrees"],
                   ["career", "work history", "professional life", "occupation"],
                   ["achievements", "accomplishments", "awards and honours"]],
        "example": "'Ada Lovelace birthplace'", "thing": "person",
    },
    "place": {
        "name_nouns": ["place", "location", "geography", "geo_place", "region", "locale", "site"],
        "object": ["a geographic gazetteer", "an atlas of places", "a geography reference", "a database of locations"],
        "subject": ["a place", "a location", "a city, region or landmark", "a geographic feature"],
        "facets": [["location", "where it lies", "coordinates and surroundings"],
                   ["country", "the country it belongs to", "which nation it is in"],
                   ["population", "number of inhabitants", "size and population"],
                   ["founding", "history and founding", "when it was established"],
                   ["landmarks", "notable sites", "sights and monuments"]],
        "example": "'capital of Portugal'", "thing": "place",
    },
    "organisation": {
        "name_nouns": ["organisation", "organization", "company", "institution", "org", "association"],
        "object": ["a directory of organisations", "a registry of companies and institutions",
                   "an organisation database", "a reference of institutions"],
        "subject": ["an organisation", "a company or institution", "a group, firm or agency",
                    "a body such as a university or band"],
        "facets": [["founders", "who started it", "its founding members"],
                   ["founding year", "when it was founded", "date of establishment"],
                   ["headquarters", "where it is based", "main office location"],
                   ["members", "leadership and members", "people who belong to it"],
                   ["activities", "what it does", "its field of work"]],
        "example": "'founder of the Acme Company'", "thing": "organisation",
    },
    "work": {
        "name_nouns": ["creative_work", "work", "artwork", "media", "title", "publication", "creation"],
        "object": ["a catalogue of creative works", "a database of books, films and music",
                   "an arts and media catalogue", "a library of creative titles"],
        "subject": ["a creative work", "a book, film or album", "a title such as a song, painting or game",
                    "a piece of art or media"],
        "facets": [["creator", "who made it", "its author, director or artist"],
                   ["release date", "when it came out", "publication year"],
                   ["publisher", "label or publisher", "who released it"],
                   ["genre", "style and genre", "what kind of work it is"],
                   ["reception", "critical response", "awards and reviews"]],
        "example": "'author of The Silent Harbour'", "thing": "work",
    },
    "event": {
        "name_nouns": ["event", "historical_event", "incident", "occurrence", "happening", "history"],
        "object": ["a chronicle of historical events", "a timeline of past events", "a history reference",
                   "a record of notable happenings"],
        "subject": ["an event", "a historical event", "a battle, treaty, election or festival", "an incident or occasion"],
        "facets": [["date", "when it happened", "the year and day"],
                   ["location", "where it took place", "its site"],
                   ["participants", "who took part", "the people and groups involved"],
                   ["outcome", "what followed", "its consequences"]],
        "example": "'year the Treaty of Velen was signed'", "thing": "event",
    },
    "science": {
        "name_nouns": ["science", "scientific_concept", "research_topic", "science_fact", "concept", "scientific_topic"],
        "object": ["a scientific reference", "a science encyclopedia", "a research knowledge base",
                   "a reference of scientific knowledge"],
        "subject": ["a scientific concept", "a discovery, theory or species", "a scientific topic",
                    "a finding or phenomenon"],
        "facets": [["definition", "what it is", "a short explanation"],
                   ["discoverer", "who discovered it", "the scientists behind it"],
                   ["date of discovery", "when it was found", "year of discovery"],
                   ["related findings", "connected results", "links to other work"]],
        "example": "'discoverer of the Kessler effect'", "thing": "concept",
    },
    "general": {
        "name_nouns": ["general", "web", "knowledge", "encyclopedia", "everything", "all_sources", "open"],
        "object": ["all available documents", "the whole document collection", "every indexed source", "the full corpus"],
        "subject": ["any topic", "anything", "any subject", "questions of every kind"],
        "facets": [["when no specialised tool fits", "if none of the specific tools applies",
                    "when the question spans several domains"],
                   ["when a narrower search found nothing", "as a fallback after an empty specialised search",
                    "if a domain search came back empty"],
                   ["for open-ended questions", "for broad or mixed topics"]],
        "example": "'when did the Orvane river flood'", "thing": "topic",
    },
}

PARAM_PHRASES: dict[str, list[str]] = {
    "query": ["Search text, for example {example}.", "What to look for: the {thing} and the fact needed, e.g. {example}.",
              "Free-text keywords, such as {example}.", "The question or keywords, e.g. {example}."],
    "top_k": ["How many results to return, at most 10.", "Number of hits wanted (1 to 10).",
              "Upper limit on returned results, between 1 and 10."],
    "year": ["Only results for this year (negative numbers are BCE).", "Year filter; use negative values for BCE.",
             "Limit to a given year."],
    "country": ["Only results from this country.", "Country filter, given by name.",
                "Name of the country to limit the search to."],
    "language": ["Source language as an ISO 639-1 code.", "Two-letter code of the language of the texts.",
                 "Language filter (ISO 639-1)."],
    "nationality": ["Citizenship of the person.", "Country the person is a national of.", "Nationality filter."],
    "occupation": ["What the person does for a living, e.g. 'chemist'.", "Profession filter, e.g. 'poet'.",
                   "Job or role of the person."],
    "place_type": ["Category of the place.", "Type of location.", "What sort of place it is."],
    "founded_year": ["Founding year filter.", "Year of establishment.", "When the organisation was set up (year)."],
    "org_type": ["Category of the organisation.", "Type of organisation.", "What sort of body it is."],
    "work_type": ["Category of the work.", "Medium of the work.", "What sort of work it is."],
    "field": ["Branch of science.", "Discipline filter.", "Scientific discipline of the topic."],
}

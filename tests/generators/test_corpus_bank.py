"""Tools that fit the corpus: a general search plus one search per kind of document, from the
documents' kind column or else from clusters of the passages; deterministic for a seed, and
each kind's search finds only passages of its kind (and those of none)."""

from __future__ import annotations

import json
import re

import pytest

from generators.tools.banks import check_option, file_bank, resolve_choice
from generators.tools.corpus_bank import corpus_bank, is_corpus_tool
from generators.tools.simulator import Simulator

THEMES = {
    "river": ("The {n} is a river that rises in the hills, flows through the valley and reaches the sea at a delta; "
              "its basin, tributaries and floods shape the farms along its banks."),
    "song": ("{n} is a song recorded by a band for their album; the single was released on vinyl, reached the charts "
             "and its lyrics and melody were praised by critics."),
    "chemist": ("{n} was a chemist who studied molecules in a laboratory, published papers on reactions and "
                "compounds, and received a prize for the synthesis of a new element."),
}
NAMES = ["Ardo", "Belim", "Corva", "Dessa", "Elwin", "Farro", "Gavri", "Hollin", "Istra", "Jorun"]


def _docs(with_kind: bool) -> list[dict]:
    out = []
    for kind, text in THEMES.items():
        for n in NAMES:
            meta = json.dumps({"kind": kind}) if with_kind else None
            out.append({"doc_id": f"{kind}-{n}", "title": f"{n} ({kind})", "text": text.format(n=n), "meta": meta})
    if with_kind:  # a kind with one passage gets no tool; the general search finds it
        out.append({"doc_id": "lone", "title": "Lone Tower", "text": "Lone Tower is a tower.",
                    "meta": json.dumps({"kind": "tower"})})
    return out


def _found(sim: Simulator, tool: str, query: str) -> list[str]:
    return [r["doc_id"] for r in json.loads(sim.call(tool, {"query": query, "top_k": 10}))["results"]]


def test_a_kind_column_gives_one_search_per_kind():
    docs = _docs(with_kind=True)
    rows = corpus_bank(docs, seed=3)
    assert rows == corpus_bank(list(reversed(docs)), seed=3)  # the same bank whatever the order
    assert rows[0]["name"] == "general_search"
    kinds = {r["name"]: json.loads(r["meta"]) for r in rows[1:]}
    assert set(kinds) == {"search_river", "search_song", "search_chemist"}
    assert all(is_corpus_tool(r) for r in rows[1:]) and kinds["search_river"]["passages"] == 10
    assert {"basin", "delta"} & set(kinds["search_river"]["words"])
    sim = Simulator(docs, seed=3, tools=rows)
    for kind in THEMES:
        found = _found(sim, f"search_{kind}", "Ardo Belim released chemist river")
        assert found and all(d.startswith(kind + "-") for d in found), found
        assert sim.domain_of(f"{kind}-Ardo") == kind
    assert sim.domain_of("lone") == "general"
    assert {d.split("-")[0] for d in _found(sim, "general_search", "Ardo")} == set(THEMES)


def test_without_a_kind_column_clusters_name_the_searches():
    docs = _docs(with_kind=False)
    rows = corpus_bank(docs, seed=5)
    assert rows == corpus_bank(docs, seed=5)
    tools = rows[1:]
    assert len(tools) >= 2 and all(json.loads(r["meta"])["terms"] for r in tools)
    theme_words = {w for t in THEMES.values() for w in re.findall(r"\w+", t.lower())}
    for r in tools:
        words = r["name"].removeprefix("search_").split("_")
        assert set(words) <= theme_words, r["name"]  # named from the passages' own words
    sim = Simulator(docs, seed=5, tools=rows)
    groups = {}
    for d in docs:
        groups.setdefault(sim.domain_of(d["doc_id"]), set()).add(d["doc_id"].split("-")[0])
    assert all(len(themes) == 1 for dom, themes in groups.items() if dom != "general"), groups
    for r in tools:  # a cluster's search returns only its own passages (and those of none)
        mine = {d["doc_id"] for d in docs if sim.domain_of(d["doc_id"]) in (r["domain"], "general")}
        assert set(_found(sim, r["name"], "Ardo Corva river song chemist")) <= mine


def test_a_tiny_corpus_gets_only_the_general_search_and_choices_resolve():
    assert [r["name"] for r in corpus_bank(_docs(False)[:5], seed=1)] == ["general_search"]
    assert resolve_choice("auto", ["world:seed=7"]) == "world"
    assert resolve_choice("auto", ["world:seed=7", "import:pages.jsonl"]) == "corpus"
    assert resolve_choice("world", ["import:x"]) == "world"
    with pytest.raises(ValueError, match="--tools must be one of"):
        check_option("everything")


def test_a_tools_file_is_a_bank(tmp_path):
    path = tmp_path / "mine.jsonl"
    tool = {"name": "lookup_page", "description": "Look a page up.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}
    path.write_text(json.dumps(tool) + "\n")
    rows = file_bank(path)
    assert [r["name"] for r in rows] == ["general_search", "lookup_page"]
    path.write_text(json.dumps(tool) + "\nnot json\n")
    with pytest.raises(ValueError, match="line 2: invalid JSON"):
        file_bank(path)


def test_bank_rows_follows_the_corpus_as_train_grpo_picks_it():
    from generators.tools.banks import bank_rows

    docs = [{**d, "source": "import:pages.jsonl"} for d in _docs(with_kind=True)]
    world = lambda: [{"name": "world"}]  # noqa: E731
    assert [r["name"] for r in bank_rows("auto", docs, world)] == [r["name"] for r in corpus_bank(docs)]
    assert bank_rows("auto", [{**d, "source": "world:seed=3"} for d in docs], world) == [{"name": "world"}]
    assert bank_rows("world", docs, world) == [{"name": "world"}]


def test_a_second_cluster_bank_leaves_the_first_ones_searches_alone():
    docs = _docs(with_kind=False)
    first = corpus_bank(docs)
    other = corpus_bank(docs[:20], seed=9)  # another corpus state and seed: other terms, another bank key
    assert {json.loads(r["meta"])["bank"] for r in first[1:]} != {json.loads(r["meta"])["bank"] for r in other[1:]}
    alone, both = Simulator(docs, tools=first), Simulator(docs, tools=first + other)
    for r in first[1:]:
        assert (alone.masks[r["domain"]] == both.masks[r["domain"]]).all()

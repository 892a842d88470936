"""Tests of the virtual tool bank: base tools, rule variants through the real gate, rendering.

Run: .venv/bin/python -m pytest tests/generators/test_tool_bank.py -q
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from generators.tools import base
from generators.llm.toolcalls import render_tools_block
from generators.tools.bank import generate_bank
from generators.tools.base import BASE_TOOLS, DOMAINS, base_rows, to_openai
from generators.tools.compute import is_compute
from generators.tools.gating import Gate
from generators.tools.variants import rule_candidates
from storage.reader import load_table
from storage.shards import write_rows


@pytest.fixture(scope="module")
def gate():
    return Gate()


@pytest.fixture(scope="module")
def build(gate):
    return generate_bank(seed=7, variants_per_tool=3, embedder=gate.embedder)


def check_tool(row: dict) -> None:
    params = json.loads(row["json_schema"])
    jsonschema.Draft202012Validator.check_schema(params)
    assert params["type"] == "object" and params["additionalProperties"] is False
    assert "query" in params["required"] and params["properties"]["query"]["type"] == "string"
    jsonschema.validate({"query": "x"}, params)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"query": "x", "not_a_param": 1}, params)


def test_base_tools_cover_every_domain_with_valid_schemas():
    rows = base_rows()
    assert [r["domain"] for r in rows] == list(DOMAINS)
    assert len({r["name"] for r in rows}) == len(rows) and len({r["tool_id"] for r in rows}) == len(rows)
    for row in rows:
        check_tool(row)
        assert row["variant_of"] is None and json.loads(row["meta"])["base"] is True
    assert "top_k" in json.loads(rows[0]["json_schema"])["properties"]


def test_variants_keep_parameter_names_and_change_wording(build):
    bases = {r["tool_id"]: r for r in build.tools if r["variant_of"] is None}
    variants = [r for r in build.tools if r["variant_of"]]
    assert len(variants) >= 3 * len(DOMAINS) - 3  # almost every domain fills its three slots
    names = [r["name"] for r in build.tools]
    assert len(set(names)) == len(names)
    for v in variants:
        check_tool(v)
        base = bases[v["variant_of"]]
        assert v["domain"] == base["domain"]
        bp, vp = json.loads(base["json_schema"]), json.loads(v["json_schema"])
        assert list(vp["properties"]) == list(bp["properties"]) and vp["required"] == bp["required"]
        assert v["description"] != base["description"] and v["name"] != base["name"]
        meta = json.loads(v["meta"])
        assert meta["method"] == "rule" and 0.6 <= meta["similarity"] <= 0.97 and meta["lexical_overlap"] <= 0.6


def test_candidates_report_accepts_and_rejects(build):
    assert build.accepted and all(c.reason == "accepted" for c in build.accepted)
    assert len(build.accepted) == sum(1 for r in build.tools if r["variant_of"])
    for c in build.rejected:
        assert c.reason != "accepted" and c.scores  # rule candidates are always scored
    assert sum(build.reasons().values()) == len(build.candidates)
    row = build.candidates[0].to_dict()
    assert {"name", "description", "accepted", "reason", "scores"} <= set(row) and "parameters" not in row


def test_bank_is_deterministic_per_seed(build, gate):
    gate.embedder._cache.clear()  # recompute every embedding, as a fresh process would
    again = generate_bank(seed=7, variants_per_tool=3, embedder=gate.embedder)
    assert again.tools == build.tools
    assert [c.to_dict() for c in again.candidates] == [c.to_dict() for c in build.candidates]
    other = generate_bank(seed=8, variants_per_tool=3, embedder=gate.embedder)
    assert [r["name"] for r in other.tools] != [r["name"] for r in build.tools]
    assert rule_candidates(BASE_TOOLS[0], seed=7, n=5) == rule_candidates(BASE_TOOLS[0], seed=7, n=5)


def test_render_tools_block_is_json_per_line(build):
    block = render_tools_block(build.tools)
    lines = block.split("\n")
    assert lines[0] == "<tools>" and lines[-1] == "</tools>" and len(lines) == len(build.tools) + 2
    for line, row in zip(lines[1:-1], build.tools):
        obj = json.loads(line)
        assert obj == to_openai(row)
        assert obj["type"] == "function" and obj["function"]["name"] == row["name"]
        assert obj["function"]["parameters"]["required"] == (["expression"] if is_compute(row) else ["query"])
    assert "'" not in lines[1].split('"description"')[0]  # JSON quoting, not a Python repr


def test_rows_fit_the_storage_schema(build, tmp_path):
    write_rows(tmp_path, "demo", "tools", "r1", build.tools)
    table = load_table("demo", "tools", tmp_path)
    assert table.num_rows == len(build.tools)
    assert sorted(table.column("tool_id").to_pylist()) == sorted(r["tool_id"] for r in build.tools)
    write_rows(tmp_path, "demo", "tools", "r1", build.tools)  # same run: no duplicates
    assert load_table("demo", "tools", tmp_path).num_rows == len(build.tools)


def test_tool_id_is_a_stable_content_hash():
    b = BASE_TOOLS[0]
    assert base.tool_id(b.domain, b.name, b.description, b.parameters()) == base_rows()[0]["tool_id"]
    assert base.tool_id(b.domain, b.name + "_x", b.description, b.parameters()) != base_rows()[0]["tool_id"]

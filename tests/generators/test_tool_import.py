"""Bring your own tools: a small tool bank in ToolForge's format (Chinese descriptions, nested
object and array parameters, several required arguments, enums) is imported into a real world
dataset, synthesized with (template texts, no model) and validated by the real rules layer,
whose replay finds the imported tools in the dataset's tool bank."""

import copy
import json
import random

import jsonschema
import pytest

from generators.corpus.build import WorldConfig, write
from generators.synth.synthesize import Session, SynthConfig, load_inputs
from generators.tools.bank import generate_bank
from generators.tools.base import base_rows
from generators.tools.fill import FillError, fill_arguments, roles_of, schema_of
from generators.tools.imported import RUN_ID, import_file, imported_rows, read_tools
from storage import load_table, write_rows
from storage.schema import load
from storage.shards import stamp
from validators.context import load_corpus
from validators.trajectory_rules import RuleContext, check_trajectory

PERSON_TOOLS = [
    {"name": "renwu_dangan_chaxun", "description": "人物档案查询工具。检索人物的身份资料、求学经历和工作履历。",
     "parameters": {"type": "object", "properties": {
         "query": {"type": "string", "description": "具体的查询请求，比如'居里夫人的求学经历'"},
         "subject_names": {"type": "array", "items": {"type": "string"}, "description": "人物的各种称谓，例如['艾萨克·牛顿', 'Isaac Newton']"},
         "data_types": {"type": "array", "items": {"type": "string"}, "minItems": 2, "uniqueItems": True,
                        "description": "资料类型，可选['个人资料', '学习经历', '工作履历']"},
         "search_scope": {"type": "string", "enum": ["概览", "详细", "全面"], "description": "检索范围"},
         "time_scope": {"type": "object", "description": "时间范围",
                        "properties": {"start_year": {"type": "integer", "minimum": 1000, "maximum": 2100},
                                       "end_date": {"type": "string", "format": "date"},
                                       "era": {"type": "string", "description": "时代，如'近代'"}},
                        "required": ["start_year", "end_date"]},
         "cultural_context": {"type": "object", "properties": {"region": {"type": "string"}}}},
         "required": ["query", "subject_names", "data_types", "search_scope", "time_scope"]}},
    {"name": "ziliao_jiansuo-quanwen", "description": "全文资料检索。按关键词和筛选条件返回人物相关段落。",
     "parameters": {"type": "object", "properties": {
         "query": {"type": "string", "description": "检索关键词"},
         "filters": {"type": "array", "minItems": 1, "description": "筛选条件列表",
                     "items": {"type": "object", "properties": {"field": {"type": "string", "description": "字段，如'职业'"},
                                                                "weight": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}},
                               "required": ["field", "weight"]}},
         "max_results": {"type": "integer", "minimum": 1, "maximum": 20, "description": "返回结果的最大数量"},
         "include_sources": {"type": "boolean", "description": "是否附上来源"}},
         "required": ["query", "filters", "max_results", "include_sources"]}},
]
GENERAL_TOOL = {"type": "function", "function": {  # the wrapped OpenAI form; its lookup is `keyword`
    "name": "tongyong_sousuo", "description": "通用信息搜索，适用于查询陌生概念和未知术语。",
    "parameters": {"type": "object", "properties": {
        "keyword": {"type": "string", "description": "搜索关键词"},
        "target_figure": {"type": "string", "description": "目标人物的主要名称，如'李白'"},
        "language": {"type": "string", "enum": ["zh", "en"], "description": "结果语言"}},
        "required": ["keyword", "target_figure", "language"], "additionalProperties": False}}}
BAD_LINES = [
    ('{"name": "broken", "description": "缺少括号"', "invalid JSON: Expecting ',' delimiter (column 41)"),
    ('["not", "an", "object"]', "not a JSON object"),
    ('{"description": "没有名字", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}', "no name"),
    ('{"name": "bad_schema", "description": "类型拼错", "parameters": {"type": "object", '
     '"properties": {"query": {"type": "strng"}}}}', "invalid JSON Schema"),
    (json.dumps({**PERSON_TOOLS[0], "description": "重复的名字"}, ensure_ascii=False), "duplicate name 'renwu_dangan_chaxun' (first on line 1)"),
    ('{"name": "search_person", "description": "与基础工具同名", "parameters": {"type": "object", '
     '"properties": {"query": {"type": "string"}}}}', "a tool of the bank already has it"),
]
BAD_START = 4  # line numbers: 1-2 person tools, 3 blank, 4.. the bad lines


def bank_file(path):
    lines = [json.dumps(t, ensure_ascii=False) for t in PERSON_TOOLS] + [""] + [b for b, _ in BAD_LINES]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_bad_lines_are_reported_by_line_and_skipped(tmp_path):
    report = read_tools(bank_file(tmp_path / "tools.jsonl").read_text(encoding="utf-8").splitlines(), "person")
    assert [r["name"] for r in report.rows] == ["renwu_dangan_chaxun", "ziliao_jiansuo-quanwen"]
    assert [n for n, _ in report.problems] == list(range(BAD_START, BAD_START + len(BAD_LINES)))
    for (_, reason), (_, expected) in zip(report.problems, BAD_LINES):
        assert expected in reason, reason
    person_base = next(r["tool_id"] for r in base_rows() if r["domain"] == "person")
    for row in report.rows:
        assert row["domain"] == "person" and row["variant_of"] == person_base
        assert json.loads(row["meta"]) == {"source": "import"}
    load("tools").validate_rows(stamp(report.rows, load("tools"), RUN_ID))


def test_arguments_follow_the_schema():
    params = PERSON_TOOLS[0]["parameters"]
    assert roles_of(params).lookup == "query" and roles_of(params).names == ("subject_names",)
    assert roles_of(GENERAL_TOOL["function"]["parameters"]).lookup == "keyword"
    args = fill_arguments(params, "Ada Varn", ["Ada Varn"], random.Random(1))
    assert args["query"] == "Ada Varn" and args["subject_names"] == ["Ada Varn"]
    assert args["data_types"] == ["个人资料", "学习经历"]  # examples quoted in the description
    assert args["search_scope"] in ("概览", "详细", "全面") and set(args["time_scope"]) == {"start_year", "end_date"}
    assert "cultural_context" not in args  # optional, not a role
    with pytest.raises(FillError, match="pattern"):
        fill_arguments({"type": "object", "properties": {"query": {"type": "string"}, "code": {
            "type": "string", "pattern": "^poi_[0-9]+$"}}, "required": ["query", "code"]}, "x", [], random.Random(0))


def test_a_schema_read_once_fills_as_its_parameters_and_stays_as_it_was():
    """schema_of (kept by the schema's text, shared by every call) fills the same arguments as
    the parameters read anew each time, and no filled value, changed later, changes it."""
    enum_list = {"type": "object", "properties": {"query": {"type": "string"}, "shape": {
        "const": {"kind": "box", "sides": [1, 2]}}, "tags": {"enum": [["a", "b"], ["c"]]}},
        "required": ["query", "shape", "tags"]}
    rows = [{"json_schema": json.dumps(p, ensure_ascii=False)} for p in
            [t["parameters"] for t in PERSON_TOOLS] + [GENERAL_TOOL["function"]["parameters"], enum_list]]
    rows += [{"json_schema": r["json_schema"]} for r in base_rows()]
    for row in rows:
        schema, params = schema_of(row), json.loads(row["json_schema"])
        assert schema_of({"json_schema": row["json_schema"]}) is schema and schema.roles == roles_of(params)
        for seed in range(20):
            once = fill_arguments(schema, "Ada Varn", ["Ada Varn"], random.Random(seed))
            assert once == fill_arguments(params, "Ada Varn", ["Ada Varn"], random.Random(seed))
            for v in once.values():  # a caller changing what it got
                if isinstance(v, dict):
                    v.clear()
                elif isinstance(v, list):
                    v.append("x")
        assert schema.parameters == params


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A world dataset with the tools imported (person file, then one general tool), a
    template synthesis run whose bank is written beside them, and its trajectories."""
    tmp = tmp_path_factory.mktemp("byot")
    root = tmp / "data"
    write(WorldConfig(seed=3, entities=200), root, "w")
    first = import_file(bank_file(tmp / "person.jsonl"), root, "w", domain="person")
    general = tmp / "general.jsonl"
    general.write_text(json.dumps(GENERAL_TOOL, ensure_ascii=False) + "\n", encoding="utf-8")
    second = import_file(general, root, "w", domain="general")
    again = import_file(tmp / "person.jsonl", root, "w", domain="person")
    imported = imported_rows(load_table("w", "tools", root).to_pylist())  # what the synthesize flow loads
    build = generate_bank(seed=3, variants_per_tool=0, reserved_names=[t["name"] for t in imported])
    write_rows(root, "w", "tools", "synth-run", build.tools)
    session = Session(load_inputs(root, "w"), SynthConfig(dataset="w", n=80, seed=5, texts="template"),
                      build.tools + imported)
    rows, _ = session.trajectories(session.plans(), None, "synth-run")
    return root, (first, second, again), imported, rows


def test_import_writes_rows_once(world):
    root, (first, second, again), imported, _ = world
    assert (first.written, second.written, again.written) == (2, 1, 0)
    assert sorted(again.present) == ["renwu_dangan_chaxun", "ziliao_jiansuo-quanwen"]
    assert again.problems == first.problems and len(first.problems) == len(BAD_LINES)
    assert load_table("w", "tools", root, run_id=RUN_ID).num_rows == 3 == len(imported)


def imported_calls(rows, imported):
    schemas = {t["name"]: json.loads(t["json_schema"]) for t in imported}
    for r in rows:
        for m in r["messages"]:
            for c in m["tool_calls"] or []:
                if c["name"] in schemas:
                    yield r, c, schemas[c["name"]]


def test_imported_tools_are_offered_and_every_call_fits_its_schema(world):
    _, _, imported, rows = world
    names = {t["name"] for t in imported}
    offered = {t["name"] for r in rows for t in r["tools"]} & names
    calls = list(imported_calls(rows, imported))
    assert offered == names and {c["name"] for _, c, _ in calls} == names
    flagged = 0
    for _, c, schema in calls:
        check = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        if (c["injected_error"] or "").startswith("wrong_args"):
            assert not check.is_valid(json.loads(c["arguments"]))
            flagged += 1
        else:
            assert check.is_valid(json.loads(c["arguments"])), c
    assert flagged and len(calls) - flagged >= 10


def test_validation_replays_imported_calls_and_rejects_corruptions(world):
    root, _, imported, rows = world
    _, simulator_for = load_corpus(str(root), "w")  # the tool bank as validation finds it: the dataset's tools
    ctx = RuleContext(simulator_for=simulator_for)
    for r in rows:
        verdicts = check_trajectory(r, ctx)
        assert all(v.passed for v in verdicts), (r["case"], [v for v in verdicts if not v.passed])
        assert verdicts[4].check == "replay" and verdicts[4].detail["calls"] >= 1
    row, call, _ = next((r, c, s) for r, c, s in imported_calls(rows, imported)
                        if c["name"] == "renwu_dangan_chaxun" and not c["injected_error"])

    bad_args = copy.deepcopy(row)  # a nested argument out of range, in the text and in tool_calls alike
    for m in bad_args["messages"]:
        for c in m["tool_calls"] or []:
            if c["id"] == call["id"]:
                args = json.loads(c["arguments"])
                before = json.dumps({"name": c["name"], "arguments": args}, ensure_ascii=False)
                args["time_scope"]["start_year"] = 999
                c["arguments"] = json.dumps(args, ensure_ascii=False)
                m["content"] = m["content"].replace(before, json.dumps({"name": c["name"], "arguments": args},
                                                                       ensure_ascii=False))
    assert [v.reason for v in check_trajectory(bad_args, ctx) if not v.passed] == ["arguments_invalid"]

    bad_result = copy.deepcopy(row)
    msg = next(m for m in bad_result["messages"] if m["role"] == "tool" and m["tool_call_id"] == call["id"])
    msg["content"] = msg["content"].replace('"snippet": "', '"snippet": "Edited. ', 1)
    assert [v.reason for v in check_trajectory(bad_result, ctx) if not v.passed] == ["replay_mismatch"]

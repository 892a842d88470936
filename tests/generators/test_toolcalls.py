"""Tool-call, think and answer parsing, and the `<tools>` block (generators/llm/toolcalls.py).

    .venv/bin/python -m pytest tests/generators/test_toolcalls.py -q
"""

from __future__ import annotations

import json

import pytest

from generators.llm.toolcalls import (extract_answer, format_tool_call, parse_tool_calls, render_tools_block,
                                      split_think, tools_system_prompt)

GOOD = [
    ('<tool_call>{"name": "search", "arguments": {"query": "Ada"}}</tool_call>',
     [{"name": "search", "arguments": {"query": "Ada"}}]),
    ('<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\ntext\n<tool_call>{"name": "b", "arguments": {"x": [1, 2]}}</tool_call>',
     [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": [1, 2]}}]),
    ('<tool_call>{"name": "f"}</tool_call>', [{"name": "f", "arguments": {}}]),
    ('<tool_call>{"name": "f", "arguments": "{\\"k\\": \\"v\\"}"}</tool_call>', [{"name": "f", "arguments": {"k": "v"}}]),
    ('<tool_call>\n```json\n{"name": "f", "arguments": {"k": 1}}\n```\n</tool_call>', [{"name": "f", "arguments": {"k": 1}}]),
    ('<tool_call>{"name": " f ", "arguments": null, "id": "x"}</tool_call>', [{"name": "f", "arguments": {}}]),
    ("no calls here", []),
]


@pytest.mark.parametrize("text,calls", GOOD)
def test_good_blocks_parse(text, calls):
    parsed = parse_tool_calls(text)
    assert parsed.calls == calls
    assert parsed.errors == []
    assert parsed.ok


BAD = [
    ('<tool_call>{"name": "f", "arguments": {"k": 1}</tool_call>', "tool_call_bad_json"),
    ("<tool_call>{'name': 'f'}</tool_call>", "tool_call_bad_json"),
    ("<tool_call></tool_call>", "tool_call_bad_json"),
    ('<tool_call>["f", {}]</tool_call>', "tool_call_not_object"),
    ('<tool_call>"f"</tool_call>', "tool_call_not_object"),
    ('<tool_call>{"arguments": {}}</tool_call>', "tool_call_missing_name"),
    ('<tool_call>{"name": "", "arguments": {}}</tool_call>', "tool_call_missing_name"),
    ('<tool_call>{"name": 3, "arguments": {}}</tool_call>', "tool_call_missing_name"),
    ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "tool_call_bad_arguments"),
    ('<tool_call>{"name": "f", "arguments": "not json"}</tool_call>', "tool_call_bad_arguments"),
    ('<tool_call>{"name": "f", "arguments": "[1]"}</tool_call>', "tool_call_bad_arguments"),
    ('<tool_call>{"name": "f", "arguments": {}}', "tool_call_unclosed"),
    ('{"name": "f", "arguments": {}}</tool_call>', "tool_call_unopened"),
]


@pytest.mark.parametrize("text,reason", BAD)
def test_bad_blocks_give_reason_codes(text, reason):
    parsed = parse_tool_calls(text)
    assert parsed.calls == []
    assert [r for r, _ in parsed.errors] == [reason]
    assert not parsed.ok


def test_good_and_bad_blocks_mix_and_keep_raw_text():
    text = ('<think>go</think>\n<tool_call>{"name": "a", "arguments": {}}</tool_call>\n'
            '<tool_call>{oops}</tool_call>\n<tool_call>{"name": "b", "arguments": {"q": "x"}}</tool_call>')
    parsed = parse_tool_calls(text)
    assert [c["name"] for c in parsed.calls] == ["a", "b"]
    assert parsed.errors == [("tool_call_bad_json", "<tool_call>{oops}</tool_call>")]
    assert parsed.content == "<think>go</think>"


def test_unclosed_block_before_a_good_one_is_reported_and_the_good_one_kept():
    text = '<tool_call>{"name": "a"\n<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    parsed = parse_tool_calls(text)
    assert parsed.calls == [{"name": "b", "arguments": {}}]
    assert [r for r, _ in parsed.errors] == ["tool_call_unclosed"]


def test_format_tool_call_round_trips():
    args = {"query": 'quote " and ünïcode', "k": [1, {"x": None}]}
    parsed = parse_tool_calls("Let me look.\n" + format_tool_call("search", args))
    assert parsed.calls == [{"name": "search", "arguments": args}]
    assert parsed.content == "Let me look."


THINK = [
    ("<think>plan</think>answer", "plan", "answer", None),
    ("no thoughts", None, "no thoughts", None),
    ("<think>a</think>x<think>b</think>y", "a\n\nb", "xy", "think_multiple"),
    ("pre<think>never closed", "never closed", "pre", "think_unclosed"),
]


@pytest.mark.parametrize("text,think,rest,error", THINK)
def test_split_think(text, think, rest, error):
    got = split_think(text)
    assert (got.think, got.rest, got.error) == (think, rest, error)


ANSWERS = [
    ("<think>x</think><answer> Paris </answer>", "Paris", None),
    ("Paris", None, "answer_missing"),
    ("<answer>a</answer><answer>b</answer>", None, "answer_multiple"),
    ("<answer>Paris", None, "answer_unclosed"),
    ("<answer>  </answer>", None, "answer_empty"),
]


@pytest.mark.parametrize("text,answer,reason", ANSWERS)
def test_extract_answer(text, answer, reason):
    assert extract_answer(text) == (answer, reason)


def test_tools_block_is_valid_json_per_line():
    schema = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    tools = [
        {"tool_id": "t1", "domain": "people", "name": "search_people", "description": "Find a person's page.",
         "json_schema": json.dumps(schema)},  # storage row: schema as a JSON string
        {"name": "lookup", "description": "Look up a fact.", "parameters": schema},
        {"type": "function", "function": {"name": "noop", "description": "Nothing."}},
    ]
    block = render_tools_block(tools)
    lines = block.split("\n")
    assert lines[0] == "<tools>" and lines[-1] == "</tools>"
    objs = [json.loads(line) for line in lines[1:-1]]  # raises on Python repr (single quotes, None)
    assert [o["function"]["name"] for o in objs] == ["search_people", "lookup", "noop"]
    assert objs[0] == {"type": "function", "function": {"name": "search_people", "description": "Find a person's page.",
                                                        "parameters": schema}}
    assert objs[2]["function"]["parameters"] == {"type": "object", "properties": {}}
    prompt = tools_system_prompt(tools, preamble="You answer questions.")
    assert prompt.startswith("You answer questions.") and block in prompt and "<tool_call>" in prompt
    assert render_tools_block([]) == "<tools>\n</tools>"

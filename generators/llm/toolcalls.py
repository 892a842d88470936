"""Parse and render the tagged parts of model output: tool calls, thinking, answers, tool lists.

Models trained in the Qwen/Hermes style call tools by writing JSON inside tags:

    <think>I need the birth year.</think>
    <tool_call>
    {"name": "search_people", "arguments": {"query": "Ada Varn"}}
    </tool_call>

Model output is data, so nothing here raises on a malformed block: each parser returns
what it could read plus `(reason_code, raw_text)` pairs for what it could not.

    >>> parse_tool_calls('<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>').calls
    [{'name': 'f', 'arguments': {'x': 1}}]

Reason codes: tool_call_bad_json, tool_call_not_object, tool_call_missing_name,
tool_call_bad_arguments, tool_call_unclosed, tool_call_unopened; think_unclosed,
think_multiple; answer_missing, answer_multiple, answer_unclosed, answer_empty.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_FENCE = re.compile(r"^```[A-Za-z]*\s*\n?(.*?)\n?```$", re.DOTALL)
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass
class ParsedCalls:
    """Tool calls read from one model message."""

    calls: list[dict] = field(default_factory=list)  # {"name": str, "arguments": dict}
    errors: list[tuple[str, str]] = field(default_factory=list)  # (reason_code, raw block)
    content: str = ""  # the text outside the tool-call blocks, stripped

    @property
    def ok(self) -> bool:
        return not self.errors


def _parse_block(body: str) -> tuple[dict | None, str | None]:
    """One block body -> (call, None) or (None, reason_code)."""
    text = body.strip()
    fenced = _FENCE.match(text)  # tolerate ```json ... ``` around the object
    if fenced:
        text = fenced.group(1).strip()
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None, "tool_call_bad_json"
    if not isinstance(obj, dict):
        return None, "tool_call_not_object"
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, "tool_call_missing_name"
    args: Any = obj.get("arguments", {})
    if isinstance(args, str):  # OpenAI style: arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except (json.JSONDecodeError, ValueError):
            return None, "tool_call_bad_arguments"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None, "tool_call_bad_arguments"
    return {"name": name.strip(), "arguments": args}, None


def parse_tool_calls(text: str) -> ParsedCalls:
    """Read every `<tool_call>{json}</tool_call>` block of `text`, in order.

    A call is {"name": str, "arguments": dict}; `arguments` may be missing (-> {}) or a JSON
    string holding an object. A block that cannot be read becomes an error with its raw
    text; an opening tag with no closing tag is `tool_call_unclosed`, a closing tag with
    no opening tag is `tool_call_unopened`.
    """
    out = ParsedCalls()
    text = text or ""
    pos, outside = 0, []
    for m in _BLOCK.finditer(text):
        between = text[pos:m.start()]
        if TOOL_CALL_CLOSE in between:
            out.errors.append(("tool_call_unopened", between))
        outside.append(between)
        # a nested opening tag means an earlier block was never closed
        body = m.group(1)
        if TOOL_CALL_OPEN in body:
            head, _, body = body.rpartition(TOOL_CALL_OPEN)
            out.errors.append(("tool_call_unclosed", TOOL_CALL_OPEN + head))
        call, reason = _parse_block(body)
        if call is not None:
            out.calls.append(call)
        else:
            out.errors.append((reason or "tool_call_bad_json", m.group(0)))
        pos = m.end()
    tail = text[pos:]
    if TOOL_CALL_OPEN in tail:
        before, _, rest = tail.partition(TOOL_CALL_OPEN)
        if TOOL_CALL_CLOSE in before:
            out.errors.append(("tool_call_unopened", before))
        out.errors.append(("tool_call_unclosed", TOOL_CALL_OPEN + rest))
        outside.append(before)
    else:
        if TOOL_CALL_CLOSE in tail:
            out.errors.append(("tool_call_unopened", tail))
        outside.append(tail)
    out.content = "".join(outside).strip()
    return out


def format_tool_call(name: str, arguments: dict) -> str:
    """The block a model is expected to write for one call (valid JSON inside)."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


@dataclass
class ThinkSplit:
    """A message split into its `<think>` part and the rest."""

    think: str | None  # None when there is no complete think block
    rest: str
    error: str | None = None  # think_unclosed | think_multiple


def split_think(text: str) -> ThinkSplit:
    """Separate `<think>...</think>` from the rest of a message.

    With several blocks, their contents are joined by a blank line and `error` is
    `think_multiple`; an opening tag with no closing tag keeps everything after it as
    the thought and reports `think_unclosed`.
    """
    text = text or ""
    blocks = list(_THINK.finditer(text))
    if not blocks:
        if "<think>" in text:
            before, _, after = text.partition("<think>")
            return ThinkSplit(after.strip(), before.strip(), "think_unclosed")
        return ThinkSplit(None, text.strip())
    rest = _THINK.sub("", text)
    error = "think_multiple" if len(blocks) > 1 else None
    if "<think>" in rest and error is None:
        error = "think_unclosed"
    return ThinkSplit("\n\n".join(b.group(1).strip() for b in blocks), rest.strip(), error)


def extract_answer(text: str) -> tuple[str | None, str | None]:
    """The single `<answer>...</answer>` of `text` -> (answer, None), else (None, reason)."""
    text = text or ""
    found = _ANSWER.findall(text)
    if len(found) > 1:
        return None, "answer_multiple"
    if not found:
        return None, "answer_unclosed" if "<answer>" in text else "answer_missing"
    answer = found[0].strip()
    if not answer:
        return None, "answer_empty"
    return answer, None


def final_answer(messages: list[dict]) -> str | None:
    """The `<answer>` of a conversation's last assistant turn (after its think), None without one."""
    final = messages[-1].get("content") or "" if messages and messages[-1].get("role") == "assistant" else ""
    return extract_answer(split_think(final).rest)[0]


def _as_function(tool: dict) -> dict:
    """A tool row (storage `tools`/trajectory tool, or OpenAI style) -> OpenAI function dict."""
    if tool.get("type") == "function" and isinstance(tool.get("function"), dict):
        fn = dict(tool["function"])
    else:
        fn = {"name": tool["name"], "description": tool.get("description", "")}
        params = tool.get("parameters", tool.get("json_schema"))
        fn["parameters"] = params
    params = fn.get("parameters")
    if isinstance(params, str):
        params = json.loads(params) if params.strip() else None
    fn["parameters"] = params if params is not None else {"type": "object", "properties": {}}
    return {"type": "function", "function": {"name": fn["name"], "description": fn.get("description", ""),
                                             "parameters": fn["parameters"]}}


def compact_signature(tool: dict) -> str:
    """One line per tool: `name(query: string, top_k?: integer) - first sentence of the description`.

    Optional parameters carry a `?`; enums are listed. About a fifth of the tokens of the JSON
    function object, which makes multi-tool prompts practical for small models.
    """
    fn = _as_function(tool)["function"]
    params = fn["parameters"] or {}
    required = set(params.get("required") or [])
    args = []
    for name, spec in (params.get("properties") or {}).items():
        typ = spec.get("type", "any") if isinstance(spec, dict) else "any"
        if isinstance(spec, dict) and spec.get("enum"):
            typ = "|".join(map(str, spec["enum"]))
        args.append(f"{name}{'' if name in required else '?'}: {typ}")
    desc = (fn.get("description") or "").strip()
    first = re.split(r"(?<!e\.g\.)(?<!i\.e\.)(?<=[.!?])\s", desc, maxsplit=1)[0] if desc else ""  # "e.g." ends no sentence
    return f"{fn['name']}({', '.join(args)})" + (f" - {first}" if first else "")


TOOL_STYLES = ("full", "compact")
_RENDERED: dict[tuple[str, str], str] = {}  # (tool id, style) -> its line


def render_tools_block(tools: Iterable[dict], style: str = "full") -> str:
    """`<tools>` + one line per tool + `</tools>`.

    style "full": one JSON function object per line (Qwen/Hermes style); "compact": one
    `compact_signature` line per tool. Accepts storage tool rows (`json_schema` or
    `parameters` as a JSON string or dict) and OpenAI-style `{"type": "function", ...}` dicts.
    """
    if style not in TOOL_STYLES:
        raise ValueError(f"tool style must be one of {', '.join(TOOL_STYLES)}, not {style!r}")
    render = compact_signature if style == "compact" else (lambda t: json.dumps(_as_function(t), ensure_ascii=False))
    lines = []
    for t in tools:
        key = (t.get("tool_id"), style) if isinstance(t, dict) and t.get("tool_id") else None
        line = _RENDERED.get(key) if key else None
        if line is None:
            line = render(t)
            if key and len(_RENDERED) < 100_000:  # (a tool id is a hash of the tool's content)
                _RENDERED[key] = line
        lines.append(line)
    return "<tools>\n" + "\n".join(lines) + ("\n" if lines else "") + "</tools>"


def tools_system_prompt(tools: Iterable[dict], preamble: str = "") -> str:
    """A system prompt offering `tools` and saying how to call them."""
    head = (preamble.strip() + "\n\n") if preamble.strip() else ""
    return (f"{head}# Tools\n\nYou may call one or more functions to answer the question. "
            "The function signatures are inside <tools></tools>:\n"
            f"{render_tools_block(tools)}\n\n"
            "To call a function, write a JSON object with its name and arguments inside "
            "<tool_call></tool_call> tags:\n"
            '<tool_call>\n{"name": <function-name>, "arguments": <arguments-object>}\n</tool_call>')

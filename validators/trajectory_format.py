"""Reading a trajectory for the rules layer (validators/trajectory_rules.py): its structure
(role order, no empty message) and its format (every assistant turn starts with <think>;
non-final turns hold only tool calls after </think>, mirrored in `tool_calls` and answered by
the tool messages; the final turn has exactly one <answer>). `parse` gives the calls of each
turn, the tool messages that answer them, the answer and each assistant message's think, or
raises Reject with the first thing wrong.

    msgs = structure(row)   # the messages, or Reject
    p = parse(msgs)         # Parsed(turns, tool_msgs, answer, thinks), or Reject
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from generators.llm.toolcalls import extract_answer, parse_tool_calls, split_think
from validators.verdict import Reject

_ROLE_CODE = {"system": "s", "user": "u", "assistant": "a", "tool": "t"}
_ROLE_ORDER = re.compile(r"s?u(at+)*a")


@dataclass
class Call:
    id: str | None
    name: str
    args: Any
    flag: str | None
    turn: int
    lookup: str = "query"  # the tool's lookup argument, set by the tools check

    @property
    def query(self) -> str | None:
        q = self.args.get(self.lookup) if isinstance(self.args, dict) else None
        return q if isinstance(q, str) else None


@dataclass
class Parsed:
    turns: list[list[Call]]  # one list per non-final assistant turn
    tool_msgs: list[list[dict]]
    answer: str
    thinks: dict[int, str]  # the think of each assistant message, by message index


def structure(row: dict) -> list[dict]:
    """The messages of `row`, in a role order the layer reads, none empty; else Reject."""
    msgs = row.get("messages")
    if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
        raise Reject("no_messages")
    roles = "".join(_ROLE_CODE.get(m.get("role"), "?") for m in msgs)
    if not _ROLE_ORDER.fullmatch(roles):
        raise Reject("role_order", roles=roles)
    for i, m in enumerate(msgs):
        if not isinstance(m.get("content"), str) or not m["content"].strip():
            raise Reject("empty_message", index=i, role=m.get("role"))
    return msgs


def _think(text: str, index: int, thinks: dict[int, str]) -> str:
    """The text after the think of an assistant message; the think goes to `thinks`."""
    if not text.lstrip().startswith("<think>"):
        raise Reject("think_missing", index=index)
    sp = split_think(text)
    if sp.think is None or sp.error:
        raise Reject("think_malformed", index=index, error=sp.error)
    if not sp.think.strip():
        raise Reject("think_missing", index=index, why="empty think")
    thinks[index] = sp.think
    return sp.rest


def parse(msgs: list[dict]) -> Parsed:
    """The calls, tool messages, answer and thinks of `msgs` (module docstring); else Reject."""
    turns, tool_msgs, thinks, i, n = [], [], {}, 0, len(msgs)
    while i < n and msgs[i]["role"] != "assistant":
        i += 1
    while i < n:
        m = msgs[i]
        rest = _think(m["content"], i, thinks)
        j = i + 1
        tools = []
        while j < n and msgs[j]["role"] == "tool":
            tools.append(msgs[j])
            j += 1
        if j >= n and not tools:  # final turn
            if "<tool_call>" in rest or "</tool_call>" in rest or m.get("tool_calls"):
                raise Reject("final_not_answer", index=i)
            answer, err = extract_answer(rest)
            if err:
                raise Reject({"answer_unclosed": "answer_empty"}.get(err, err), index=i)
            return Parsed(turns, tool_msgs, answer, thinks)
        parsed = parse_tool_calls(rest)
        if parsed.errors:
            code = parsed.errors[0][0]
            raise Reject("tool_call_bad_json" if code == "tool_call_bad_json" else "tool_call_malformed",
                         index=i, error=code, raw=parsed.errors[0][1][:200])
        if not parsed.calls:
            raise Reject("no_tool_calls", index=i)
        if parsed.content:
            raise Reject("text_outside_calls", index=i, text=parsed.content[:200])
        structured = m.get("tool_calls") or []
        calls = []
        if structured:
            if len(structured) != len(parsed.calls):
                raise Reject("tool_calls_mismatch", index=i, why="count")
            for s, p in zip(structured, parsed.calls):
                try:
                    sargs = json.loads(s.get("arguments") or "{}")
                except (TypeError, ValueError):
                    raise Reject("tool_call_bad_json", index=i, why="structured arguments") from None
                if s.get("name") != p["name"] or sargs != p["arguments"]:
                    raise Reject("tool_calls_mismatch", index=i, name=p["name"])
                calls.append(Call(s.get("id"), p["name"], p["arguments"], s.get("injected_error"), len(turns)))
        else:
            calls = [Call(None, p["name"], p["arguments"], None, len(turns)) for p in parsed.calls]
        if len(tools) != len(calls):
            raise Reject("tool_message_mismatch", index=i, calls=len(calls), tool_messages=len(tools))
        for c, t in zip(calls, tools):
            if (c.id is not None and t.get("tool_call_id") not in (None, c.id)) or \
                    (t.get("name") not in (None, c.name)):
                raise Reject("tool_message_mismatch", index=i, call=c.name)
        turns.append(calls)
        tool_msgs.append(tools)
        i = j
    raise Reject("final_not_answer", why="no final assistant turn")

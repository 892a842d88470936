"""The question construction path (QCP): how an examiner built its question, step by step.

One step per search call of the examiner's conversation: the call's query, the doc ids the
simulator returned, their passages (snippets) and the examiner's `<think>` note of that turn.
`QCP.to_json()` is exactly the `qcp` field of a `tasks` row (storage/schemas/tasks.json) and
`QCP.from_json` reads it back (the dataclasses live in generators/qcp.py, so the corpus
question builder writes the same shape). `teacher_context` renders what a teacher is prompted with.

    qcp = qcp_from_messages(messages)              # an examiner conversation
    row["qcp"] = qcp.to_json(); QCP.from_json(row["qcp"]) == qcp
    teacher_context(row, "qcp")                    # question + every step's query and passages

Tool calls are read from assistant turns the way the rollout reads them (parse_tool_calls on
the whole text) and answered, in order, by the tool messages that follow the turn.
"""

from __future__ import annotations

import json

from generators.llm.toolcalls import parse_tool_calls, split_think
from generators.qcp import QCP, Step

__all__ = ["MODES", "QCP", "Step", "call_query", "read_results", "qcp_from_messages", "teacher_context"]
MODES = ("qcp", "answer", "none")


def call_query(arguments: dict) -> str:
    """The query of a search call: its `query` argument, else all its arguments as JSON."""
    q = arguments.get("query")
    if isinstance(q, str):
        return q.strip()
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False) if arguments else ""


def read_results(content) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(doc ids, snippets) of a simulator tool message; empty for an error or unreadable text."""
    try:
        obj = json.loads(content) if isinstance(content, str) else None
    except ValueError:
        return (), ()
    results = obj.get("results") if isinstance(obj, dict) else None
    if not isinstance(results, list):
        return (), ()
    found = [r for r in results if isinstance(r, dict) and r.get("doc_id") is not None]
    return tuple(str(r["doc_id"]) for r in found), tuple(str(r.get("snippet") or "") for r in found)


def _text(message) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


def qcp_from_messages(messages, seed_doc_id: str | None = None) -> QCP:
    """The QCP of an examiner conversation: one step per tool call of its assistant turns,
    answered by the tool messages after that turn in order (a call with no answer, or an
    error answer, has no doc ids). Never raises on malformed messages."""
    steps: list[Step] = []
    pending: list[tuple[str, str]] = []  # (query, note) of calls still waiting for their tool message
    for m in messages if isinstance(messages, list) else []:
        role = m.get("role") if isinstance(m, dict) else None
        if role == "assistant":
            steps += [Step(q, note=n) for q, n in pending]
            text = _text(m)
            note = split_think(text).think or ""
            pending = [(call_query(c["arguments"]), note) for c in parse_tool_calls(text).calls]
        elif role == "tool" and pending:
            query, note = pending.pop(0)
            doc_ids, passages = read_results(_text(m))
            steps.append(Step(query, doc_ids, passages, note))
    steps += [Step(q, note=n) for q, n in pending]
    return QCP(tuple(steps), seed_doc_id)


def teacher_context(task: dict, mode: str = "qcp") -> str:
    """The text a teacher sees about a task: "none" the question only, "answer" the question
    and its answer, "qcp" the question and every step's query with its retrieved passages."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    lines = [f"Question: {task['question']}"]
    if mode == "answer":
        lines.append(f"Answer: {task['answer']}")
    elif mode == "qcp":
        qcp = QCP.from_json(task["qcp"])
        lines.append("")
        lines.append("How the question was built:")
        for i, step in enumerate(qcp.steps, 1):
            lines.append(f"Step {i}. Search: {step.query}")
            for doc_id, passage in zip(step.doc_ids, step.passages):
                lines.append(f"  [{doc_id}] {passage}")
    return "\n".join(lines)

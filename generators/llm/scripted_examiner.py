"""The scripted stand-in's replies to self-play's examiner (selfplay/examiner.py), so that the
stand-in engine and ScriptedBackend pose tasks and every self-play phase can be loaded
without a model.

The examiner makes one search per hop its prompt asks for: first its start document's title,
then the first title of the last results it has not searched yet. Then it asks which page
the last search returned first besides the one searched for ('Which page did the search for
"Q" return first?'), with that page's title as the answer: a task the examiner's parser and
the task rules accept (the title is in its page). A conversation it cannot go on with (no
results, nothing new to search) gets a last turn without a question, which the parser
rejects.

    scripted_examiner_text(messages)   # the next examiner turn; None for any other prompt
"""

from __future__ import annotations

import json
import re

from generators.llm.toolcalls import format_tool_call, parse_tool_calls

EXAMINER_HEAD = "You are an examiner."
_HOPS = re.compile(r"^Target hop count: (\d+)\s*$", re.M)
_START = re.compile(r"^Start document: (.*)$", re.M)
_TOOL = re.compile(r'"name": "([^"]+)"')
_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.S)


def scripted_examiner_text(messages: list[dict]) -> str | None:
    """The examiner's next turn (module docstring), or None when `messages` are not an
    examiner's conversation (the system message is not the examiner's prompt)."""
    system = str(messages[0].get("content") or "") if messages else ""
    if not system.startswith(EXAMINER_HEAD) or len(messages) < 2:
        return None
    user = str(messages[1].get("content") or "")
    hops, start, tool = _HOPS.search(user), _START.search(user), _TOOL.search(system)
    if not (hops and start and tool):
        return "<think>The prompt is not one I can work from.</think>"
    searched = [q for m in messages if m.get("role") == "assistant"
                for c in parse_tool_calls(str(m.get("content") or "")).calls
                if isinstance(c.get("arguments"), dict) and isinstance(q := c["arguments"].get("query"), str)]
    titles = _last_titles(messages)
    if not searched:
        return _search(tool.group(1), start.group(1).strip())
    fresh = [t for t in titles if t not in searched]
    if len(searched) < int(hops.group(1)) and fresh:
        return _search(tool.group(1), fresh[0])
    last = searched[-1]
    answers = [t for t in titles if t.lower() not in last.lower() and last.lower() not in t.lower()]
    if not answers:
        return f"<think>The search for \"{last}\" found nothing to ask about.</think>"
    return (f"<think>The search for \"{last}\" returned \"{answers[0]}\" first.</think>\n"
            f"<question>Which page did the search for \"{last}\" return first?</question>\n"
            f"<answer>{answers[0]}</answer>")


def _search(tool: str, query: str) -> str:
    return f"<think>I search for \"{query}\".</think>\n{format_tool_call(tool, {'query': query})}"


def _last_titles(messages: list[dict]) -> list[str]:
    """The titles of the results in the last tool response, in order."""
    for m in reversed(messages):
        found = _RESPONSE.search(str(m.get("content") or ""))
        if found:
            try:
                results = json.loads(found.group(1)).get("results") or []
            except (ValueError, AttributeError):
                return []
            return [r["title"] for r in results if isinstance(r, dict) and isinstance(r.get("title"), str)]
    return []

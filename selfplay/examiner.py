"""The examiner: its prompt, and the parser that turns its conversation into a `tasks` row.

The examiner gets a start document and a target hop count h. It thinks, searches the corpus
with the offered tools (answered by the BM25 simulator), and ends with exactly one
`<question>` and one `<answer>`. `parse_examiner` gives the task row (storage schema
`tasks`, its path of searches in `qcp`, see selfplay/qcp.py) or raises
`validators.verdict.Reject` with a reason code of REJECTS; any text gives one or the other.

    messages = examiner_messages(document, hops=2, tools_block=render_tools_block(tools))
    ... the rollout appends the examiner's turns and the simulator's tool messages ...
    row = parse_examiner(messages, 2, "task-1", "demo", seed_doc_id=document["doc_id"])

Besides its own codes, the row must pass the task rules (validators/question_rules.py:
`answer_in_question`, `qcp_step_no_query`, `qcp_step_no_evidence`, and with `documents`
given `evidence_doc_missing`, `answer_not_in_last_step`), whose code it raises.
"""

from __future__ import annotations

import json
import re

from generators.answers import normalize
from generators.llm.toolcalls import extract_answer, format_tool_call, parse_tool_calls, split_think
from selfplay.qcp import qcp_from_messages
from validators.question_rules import check_task_rules
from validators.schema_layer import check_schema
from validators.rule_context import RuleContext
from validators.verdict import Reject

REJECTS: dict[str, str] = {
    "no_question": "the final turn has no non-empty <question>...</question>",
    "multiple_questions": "the final turn has more than one <question>",
    "no_answer": "the final turn has no non-empty <answer>...</answer>",
    "multiple_answers": "the final turn has more than one <answer>",
    "unparseable_call": "an assistant turn holds a <tool_call> block that cannot be read",
    "answer_in_question": "the question contains the answer (after answer normalisation)",
    "no_search": "the examiner made no search call",
    "too_few_searches": "fewer than h-1 distinct search queries for a question of h hops",
    "schema_violation": "the task row would break the tasks schema",
}
_QUESTION = re.compile(r"<question>(.*?)</question>", re.DOTALL)
_ANSWER_CODES = {"answer_multiple": "multiple_answers"}  # every other extract_answer failure: no_answer

SYSTEM = """You are an examiner. From a start document you write one question that takes {hops} \
hop(s) of reasoning to answer: each hop finds a fact in another document, and the next hop \
needs that fact. Build the question by searching the corpus.

{tools_block}

Work in turns. Each turn starts with your reasoning inside <think></think>. While you are \
still building the question, follow it with one or more search calls, for example:
{example}
and wait for the results. Make at least {searches} search(es) with different queries; each \
hop should come from what a search returned.

When you are done, write a last turn with <think></think>, then exactly one \
<question>...</question> and exactly one <answer>...</answer>. The answer is a short phrase \
found in the last documents you retrieved; the question must not contain it."""

USER = """Start document: {title}

{text}

Target hop count: {hops}"""


def examiner_messages(document: dict, hops: int, tools_block: str) -> list[dict]:
    """The examiner's prompt: a system message with the output format and the tools, and a
    user message with the start document (`title`, `text`) and the target hop count."""
    if hops < 1:
        raise ValueError(f"hops must be at least 1, got {hops}")
    example = format_tool_call("<tool name>", {"query": "..."})
    system = SYSTEM.format(hops=hops, tools_block=tools_block.strip(), example=example, searches=max(1, hops - 1))
    user = USER.format(title=document.get("title") or "", text=document.get("text") or "", hops=hops)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _final_text(messages: list) -> str:
    last = messages[-1] if messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant" or not isinstance(last.get("content"), str):
        return ""
    return last["content"]


def _question_and_answer(text: str) -> tuple[str, str]:
    rest = split_think(text).rest
    questions = _QUESTION.findall(rest)
    if len(questions) > 1:
        raise Reject("multiple_questions", count=len(questions))
    if not questions or not questions[0].strip():
        raise Reject("no_question")
    answer, reason = extract_answer(rest)
    if answer is None:
        raise Reject(_ANSWER_CODES.get(reason, "no_answer"), why=reason)
    return questions[0].strip(), answer


def _check_calls(messages: list) -> None:
    for i, m in enumerate(messages):
        if isinstance(m, dict) and m.get("role") == "assistant" and isinstance(m.get("content"), str):
            errors = parse_tool_calls(m["content"]).errors
            if errors:
                raise Reject("unparseable_call", message=i, error=errors[0][0], raw=errors[0][1][:200])


def parse_examiner(messages, hops: int, task_id: str, dataset: str | None, *, seed_doc_id: str | None = None,
                   examiner_step: int = 0, aliases=(), documents: dict | None = None) -> dict:
    """The tasks row of an examiner conversation whose target was `hops` hops, or Reject.

    `documents` ({doc_id: (title, text)}) also checks that the evidence exists and that the
    answer is in a document of the last search; without it those rules are skipped."""
    messages = messages if isinstance(messages, list) else []
    _check_calls(messages)
    question, answer = _question_and_answer(_final_text(messages))
    qcp = qcp_from_messages(messages, seed_doc_id)
    if not qcp.steps:
        raise Reject("no_search")
    distinct = {normalize(q) for q in qcp.queries()} - {""}
    if len(distinct) < hops - 1:
        raise Reject("too_few_searches", distinct_queries=len(distinct), hops=hops)
    row = {"task_id": task_id, "question": question, "answer": answer, "aliases": [str(a) for a in aliases],
           "qcp": qcp.to_json(), "hop_count": len(qcp.steps), "examiner_step": examiner_step,
           "meta": json.dumps({"dataset": dataset, "target_hops": hops}, ensure_ascii=False)}
    for v in check_task_rules(row, RuleContext(documents=documents)):
        if not v.passed:
            raise Reject(v.reason, **{**(v.detail if isinstance(v.detail, dict) else {}), "check": v.check})
    v = check_schema(row, "tasks")
    if not v.passed:
        raise Reject("schema_violation", **v.detail)
    return row

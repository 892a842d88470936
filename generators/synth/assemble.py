"""Turn a skeleton plus the LLM's texts into a `trajectories` row.

Messages: a system prompt with the offered tools in a Qwen/Hermes `<tools>` block, the
user's question, one assistant turn per skeleton turn (`<think>…</think>` then one
`<tool_call>{json}</tool_call>` block per call, mirrored in `tool_calls`), one tool message
per call (the simulator's output), and a final `<think>…</think><answer>…</answer>`.
`meta` keeps what a validator needs to replay every call.
"""

from __future__ import annotations

import hashlib
import json

from generators.llm.toolcalls import render_tools_block
from generators.synth.skeleton import Skeleton
from generators.tools.base import parameters_of

SYSTEM_HEAD = ("You are a helpful assistant that answers questions by calling tools. "
               "You may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n")
SYSTEM_TAIL = ("\n\nBefore every action, reason inside <think></think>. For each function call, return a JSON "
               "object with the function name and arguments within <tool_call></tool_call> XML tags:\n"
               "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>\n"
               "When you know the answer, reply with <think>...</think> followed by <answer>...</answer>.")


def system_prompt(tools: list[dict], style: str = "full") -> str:
    """The system prompt offering `tools`; style "full" (JSON schemas) or "compact" (signatures)."""
    return SYSTEM_HEAD + render_tools_block(tools, style) + SYSTEM_TAIL


def tool_call_block(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"


_PARAMETERS: dict[str, str] = {}  # tool id (a hash of the tool's content) -> its parameters as JSON


def _parameters_json(tool: dict) -> str:
    text = _PARAMETERS.get(tool["tool_id"])
    if text is None:
        text = json.dumps(parameters_of(tool), ensure_ascii=False)
        if len(_PARAMETERS) < 100_000:
            _PARAMETERS[tool["tool_id"]] = text
    return text


def traj_id_for(run_key: str, triple_id: str, case: str, variant: int = 0) -> str:
    """Stable id of the trajectory a run makes for (triple, case, variant): reruns find it again."""
    tail = f"|{variant}" if variant else ""
    return hashlib.sha256(f"{run_key}|{triple_id}|{case}{tail}".encode()).hexdigest()[:24]


def traj_id(sk: Skeleton, run_key: str) -> str:
    return traj_id_for(run_key, sk.plan.triple_id, sk.plan.case, sk.plan.variant)


def to_row(sk: Skeleton, thinks: list[str], final_think: str, answer: str, sources: list[str],
           run_key: str, tool_style: str = "full", retriever: dict | None = None) -> dict:
    """`thinks[i]` is the reasoning of turn i; `sources` says where each text came from."""
    msgs = [{"role": "system", "content": system_prompt(sk.offered, tool_style)},
            {"role": "user", "content": sk.triple["question"]}]
    calls_meta = {}
    for turn, think in zip(sk.turns, thinks):
        blocks = "\n".join(tool_call_block(c.tool["name"], c.arguments) for c in turn.calls)
        msgs.append({"role": "assistant", "content": f"<think>{think}</think>\n{blocks}",
                     "tool_calls": [{"id": c.id, "name": c.tool["name"],
                                     "arguments": json.dumps(c.arguments, ensure_ascii=False),
                                     "injected_error": c.injected_error} for c in turn.calls]})
        for c in turn.calls:
            msgs.append({"role": "tool", "content": c.result, "tool_call_id": c.id, "name": c.tool["name"]})
            calls_meta[c.id] = {**c.replay_key(), "hop_doc_id": c.hop.doc_id}
    msgs.append({"role": "assistant", "content": f"<think>{final_think}</think>\n<answer>{answer}</answer>"})
    for m in msgs:
        m.setdefault("tool_calls", None)
        m.setdefault("tool_call_id", None)
        m.setdefault("name", None)
    meta = {"seed": sk.seed, "calls": calls_meta, "needed_tools": sk.needed,
            "plan": [[h.doc_id for h in r] for r in sk.plan.rounds],
            "queries": [[h.query for h in r] for r in sk.plan.rounds],
            "text_sources": sources, "golden_doc_ids": list(sk.triple["golden_doc_ids"]),
            "aliases": list(sk.triple.get("aliases", [])), "qtype": sk.triple.get("qtype"),
            "hop_count": sk.triple.get("hop_count")}
    if retriever is not None:  # (not with bm25: the default's rows are what they always were)
        meta["retriever"] = retriever
    tid = traj_id(sk, run_key)
    return {"id": tid, "traj_id": tid, "triple_id": sk.triple["triple_id"], "question": sk.triple["question"],
            "route": sk.plan.route, "case": sk.plan.case, "messages": msgs,
            "tools": [{"tool_id": t["tool_id"], "name": t["name"], "description": t["description"],
                       "parameters": _parameters_json(t)} for t in sk.offered],
            "correct_tools": sk.correct, "answer": answer, "meta": json.dumps(meta, ensure_ascii=False, sort_keys=True)}

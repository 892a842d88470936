"""`forgeplay show DATASET ID`: one record as a person reads it.

A trajectory or a rollout is its conversation turn by turn (each tool call with its
arguments, each tool result under the call it answers), a task its question construction
path, any other kind its fields; then the verdicts validation gave it (from every dataset
that holds verdicts about it, storage/lookup.py) and its lineage (run, time, model, backend,
config hash, parent ids). `--format json` prints one JSON document: the record, its verdicts
and where its run record is. Imports DuckDB and the storage layer only, so it answers at once.

    forgeplay show demo 3f2a9c0d1e2b4c5d6e7f8091a2b3c4d5
    forgeplay show demo_valid t-0007 --kind trajectories --full
    forgeplay show demo_labels k1 --format json | jq .record.label
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from enum import Enum
from typing import Annotated, Optional

import typer

from storage.configcli import DataRoot, fail

WIDTH = 100
KIND_NAMES = {"documents": "document", "triples": "triple", "tools": "tool", "trajectories": "trajectory",
              "tasks": "task", "rollouts": "rollout", "labels": "label", "verdicts": "verdict"}
TOOLS_BLOCK = re.compile(r"^<tools>\n(.*?)\n</tools>$", re.S | re.M)  # the offered tools, one a line
CALL_BLOCK = re.compile(r"\s*<tool_call>.*?</tool_call>", re.S)


class Format(str, Enum):
    text = "text"
    json = "json"


def show(dataset: Annotated[str, typer.Argument(help="Dataset name (as `forgeplay datasets` lists them).")],
         record_id: Annotated[str, typer.Argument(
             metavar="ID", help="The row's id, or its kind's own id (traj_id, task_id, rollout_id, triple_id, "
                                "doc_id, tool_id; a label's prompt_id).")],
         kind: Annotated[Optional[str], typer.Option(
             "--kind", help="Look only in this record kind (e.g. trajectories); default: every kind but verdicts.")] = None,
         format: Annotated[Format, typer.Option("--format", "-f", help="text, or json: one JSON document.")] = Format.text,
         full: Annotated[bool, typer.Option("--full", help="Also print the offered tools' schemas in the system "
                                                          "prompt, the tool calls as the model wrote them and meta.")] = False,
         data_root: DataRoot = None) -> None:
    """Print one record: its conversation turn by turn with tool calls and results, its verdicts, its lineage."""
    from storage.lookup import NotFound, find

    try:
        found = find(data_root, dataset, record_id, kind)
    except NotFound as e:
        fail(str(e))
    if format == Format.json:
        doc = {"dataset": found.dataset, "kind": found.kind, "matches": found.matches, "record": found.row,
               "verdicts": found.verdicts, "run_record": found.run_record}
        sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n")
        return
    sys.stdout.write("\n".join(render(found, full)) + "\n")


def render(found, full: bool = False) -> list[str]:
    """The text of `forgeplay show`: header, body for the kind, verdicts, lineage."""
    row, kind = found.row, found.kind
    out = [f"{KIND_NAMES.get(kind, kind)} {row.get('id')} in {found.dataset}"]
    if found.matches > 1:
        out.append(f"({found.matches} rows carry this id; the latest is shown, give its id for another)")
    body = {"trajectories": _trajectory, "rollouts": _rollout, "tasks": _task}.get(kind, _fields)
    out += body(row, full)
    out += _verdict_lines(found.verdicts)
    out += _lineage(row, found.run_record)
    return out


def _trajectory(row: dict, full: bool) -> list[str]:
    out = [f"question: {row.get('question')}", f"answer:   {row.get('answer')}",
           f"case: {row.get('case')}   route: {row.get('route')}   triple: {row.get('triple_id')}",
           "tools offered: " + ", ".join(t.get("name", "?") for t in row.get("tools") or []),
           f"correct tools: {', '.join(row.get('correct_tools') or [])}"]
    from storage.schema import meta_of

    meta = meta_of(row)
    if meta.get("qtype") or meta.get("hop_count"):
        out.append(f"question type: {meta.get('qtype')}   hops: {meta.get('hop_count')}")
    return out + _meta(row, full) + _conversation(row.get("messages") or [], full)


def _rollout(row: dict, full: bool) -> list[str]:
    out = [f"prompt: {row.get('prompt_id')}   policy version: {row.get('policy_version')}",
           f"answer: {row.get('answer')}   reward: {row.get('reward')}   tokens: {row.get('num_tokens')}"]
    if row.get("logprob_mean") is not None:
        out.append(f"log-prob: sum {row['logprob_sum']:.3f}, mean {row['logprob_mean']:.3f}, min {row['logprob_min']:.3f}")
    return out + _meta(row, full) + _conversation(row.get("messages") or [], full)


def _task(row: dict, full: bool) -> list[str]:
    out = [f"question: {row.get('question')}", f"answer:   {row.get('answer')}",
           f"hops: {row.get('hop_count')}   examiner step: {row.get('examiner_step')}"]
    if row.get("aliases"):
        out.append(f"aliases: {', '.join(row['aliases'])}")
    qcp = row.get("qcp") or {}
    out.append(f"question construction path (from {qcp.get('seed_doc_id')}):")
    for i, hop in enumerate(qcp.get("hops") or [], 1):
        out.append(f"  hop {i}: {hop.get('query')!r} -> {', '.join(hop.get('doc_ids') or [])}"
                   + (f"  ({hop['note']})" if hop.get("note") else ""))
        out += [_wrap(p, "      ") for p in hop.get("passages") or []]
    return out + _meta(row, full)


def _fields(row: dict, full: bool) -> list[str]:
    skip = {"id", "run_id", "created_at", "schema_version", "lineage", "meta"}
    out = []
    for k, v in row.items():
        if k not in skip:
            text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
            out.append(_wrap(f"{k}: {text}", "    ").lstrip())
    return out + _meta(row, True)


def _meta(row: dict, full: bool) -> list[str]:
    """The row's meta whole with --full (and for kinds without a body of their own), else its keys."""
    from storage.schema import meta_of

    meta = meta_of(row)
    if not meta:
        return []
    if not full:
        return [_wrap(f"meta: {', '.join(meta)} (--full prints it)", "    ").lstrip()]
    return [_wrap("meta: " + json.dumps(meta, ensure_ascii=False, default=str), "    ").lstrip()]


def _conversation(messages: list[dict], full: bool) -> list[str]:
    """Each message under a rule: its text, then its tool calls one a line; a tool result's
    search hits one a line. Without `full` the tools block of the system prompt and the
    calls' markup in an assistant's text are left out (the header and the call lines say it)."""
    out = []
    for i, m in enumerate(messages, 1):
        role, text = m.get("role"), (m.get("content") or "").strip()
        head = f"tool {m.get('name')} (answers {m.get('tool_call_id')})" if role == "tool" else role
        out.append(f"--- {i}. {head} " + "-" * max(3, WIDTH - 8 - len(head)))
        if not full and role == "system":
            text = TOOLS_BLOCK.sub(lambda b: f"<tools> {len(b.group(1).splitlines())} tools, listed above "
                                             f"(--full prints them) </tools>", text)
        if not full and m.get("tool_calls"):
            text = CALL_BLOCK.sub("", text).strip()
        out += _results(text) if role == "tool" else [_wrap(line, "") for line in text.splitlines()]
        for call in m.get("tool_calls") or []:
            err = f"  [injected error: {call['injected_error']}]" if call.get("injected_error") else ""
            out.append(f"  -> call {call.get('name')}({_args(call.get('arguments'))})  id {call.get('id')}{err}")
    return out


def _results(text: str) -> list[str]:
    """A search result as one line per hit (doc id, title: snippet); any other result as it is."""
    try:
        hits = json.loads(text).get("results")
        assert isinstance(hits, list) and all(isinstance(h, dict) for h in hits)
    except (ValueError, AttributeError, AssertionError):
        return [_wrap(line, "") for line in text.splitlines()]
    if not hits:
        return ["(no results)"]
    return [_wrap(f"[{h.get('doc_id')}] {h.get('title')}: {h.get('snippet', h.get('text', ''))}", "    ").lstrip()
            for h in hits]


def _args(arguments) -> str:
    try:
        parsed = json.loads(arguments)
    except (TypeError, ValueError):
        return str(arguments)
    if not isinstance(parsed, dict):
        return json.dumps(parsed, ensure_ascii=False)
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in parsed.items())


def _verdict_lines(verdicts: list[dict]) -> list[str]:
    if not verdicts:
        return ["verdicts: none (not validated)"]
    failed = [v for v in verdicts if not v["passed"]]
    state = (f"rejected at {failed[0]['layer']} ({failed[0]['reason']})" if failed
             else f"accepted by {len(verdicts)} checks")
    out = [f"verdicts ({', '.join(sorted({v['dataset'] for v in verdicts}))}): {state}"]
    for v in verdicts:
        mark = "pass" if v["passed"] else f"REJECT {v['reason']}"
        score = "" if v.get("score") is None else f"  score {v['score']:.3f}"
        detail = f"  {v['detail']}" if v.get("detail") and not v["passed"] else ""
        out.append(f"  {v['layer']:<13} {v['check']:<32} {mark}{score}{detail}")
    return out


def _lineage(row: dict, run_record: str | None) -> list[str]:
    lin = row.get("lineage") or {}
    out = ["lineage:", f"  run: {row.get('run_id')}   created: {row.get('created_at')}   "
                       f"schema version: {row.get('schema_version')}"]
    out.append(f"  model: {lin.get('model') or '-'}   backend: {lin.get('backend') or '-'}   "
               f"config hash: {lin.get('config_hash') or '-'}")
    out.append(f"  parents: {', '.join(lin.get('parent_ids') or []) or '-'}")
    if run_record:
        out.append(f"  run record: {run_record}")
    return out


def _wrap(text: str, indent: str) -> str:
    return "\n".join(textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent,
                                   replace_whitespace=False, drop_whitespace=True)) or indent.rstrip()


def register(app: typer.Typer) -> None:
    app.command()(show)

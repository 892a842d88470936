"""Layer 4 (SSP-style answerability): a question must be answerable from its golden
context mixed with distractor passages, and must NOT be answerable with no context at all
(leakage or a trivial question). Works for trajectories, triples and tasks (whose golden context
is their question construction path: `path_evidence`); calls the model only through the
backend protocol, both prompts of all records in one batched call.
`AnswerabilityCheck` is the layer's check (validators/check.py).
"""

from __future__ import annotations

import json
import random

from generators.answers import match
from generators.llm.base import ChatRequest
from generators.llm.toolcalls import extract_answer
from storage.schema import meta_of
from validators.check import Check, CheckContext
from validators.question_rules import answer_documents
from validators.verdict import Verdict, fail, ok

LAYER = "answerability"
WITH_CONTEXT = ("Answer the question using the passages. Reply with only the answer inside "
                "<answer></answer>.\n\n{context}\n\nQuestion: {question}")
NO_CONTEXT = "Answer the question. Reply with only the answer inside <answer></answer>.\n\nQuestion: {question}"


def golden_ids(row: dict, kind: str, documents: dict | None = None) -> list[str]:
    if kind == "triples":
        return list(row.get("golden_doc_ids") or [])
    if kind == "tasks" and row.get("qcp"):
        return path_evidence(row, documents or {})
    return list(meta_of(row).get("golden_doc_ids") or [])


def path_evidence(task: dict, documents: dict[str, tuple[str, str]]) -> list[str]:
    """A task's golden documents, from its question construction path (`qcp`): the start
    document, each search's first result, and the last search's results that hold the answer."""
    qcp = task["qcp"] if isinstance(task["qcp"], dict) else json.loads(task["qcp"])
    hops = qcp.get("hops") or []
    ids = [qcp.get("seed_doc_id")] + [h["doc_ids"][0] for h in hops if h.get("doc_ids")]
    if hops and hops[-1].get("doc_ids"):  # the documents the task rule `answer_reached` finds
        ids += answer_documents({**task, "qcp": qcp}, documents)
    return list(dict.fromkeys(d for d in ids if d))


def aliases(row: dict) -> list[str]:
    al = row.get("aliases") or meta_of(row).get("aliases")
    return [a for a in al or [] if isinstance(a, str)]


def _reply(text: str) -> str:
    a, _ = extract_answer(text)
    return a if a is not None else (text or "").strip().split("\n")[0]


def check_answerability(rows: list[dict], kind: str, backend, documents: dict[str, tuple[str, str]],
                        distractors: int = 3, min_f1: float = 0.5, seed: int = 0,
                        max_tokens: int = 24) -> list[Verdict]:
    doc_ids = sorted(documents)
    reqs, plan = [], []
    for row in rows:
        q = str(row.get("question") or "")
        gold = [d for d in golden_ids(row, kind, documents) if d in documents]
        rng = random.Random(f"{seed}|{q}")
        others = [d for d in rng.sample(doc_ids, min(len(doc_ids), distractors + len(gold))) if d not in gold][:distractors]
        ctx_ids = gold + others
        rng.shuffle(ctx_ids)
        context = "\n\n".join(f"[{documents[d][0]}] {documents[d][1][:600]}" for d in ctx_ids)
        has_ctx = bool(gold)
        if has_ctx:
            reqs.append(WITH_CONTEXT.format(context=context, question=q))
        reqs.append(NO_CONTEXT.format(question=q))
        plan.append(has_ctx)
    outs = backend.generate([ChatRequest(messages=[{"role": "user", "content": p}], n=1, temperature=0.0,
                                         max_tokens=max_tokens) for p in reqs]) if reqs else []
    model = str(backend.model or "?")
    verdicts, k = [], 0
    for row, has_ctx in zip(rows, plan):
        gold, al = str(row.get("answer") or ""), aliases(row)
        with_m = None
        if has_ctx:
            with_m = match(_reply(outs[k][0].text), gold, al)
            k += 1
        no_m = match(_reply(outs[k][0].text), gold, al)
        k += 1
        detail = {"model": model, "prompts": [WITH_CONTEXT, NO_CONTEXT],
                  "with_context_f1": None if with_m is None else round(with_m.f1, 3), "no_context_f1": round(no_m.f1, 3)}
        if no_m.em or no_m.f1 >= min_f1:
            verdicts.append(fail(LAYER, "ssp", "answerable_without_context", score=no_m.f1, detail=detail))
        elif with_m is None:
            verdicts.append(ok(LAYER, "ssp", reason="no_context", detail=detail))
        elif not (with_m.em or with_m.f1 >= min_f1):
            verdicts.append(fail(LAYER, "ssp", "not_answerable_with_context", score=with_m.f1, detail=detail))
        else:
            verdicts.append(ok(LAYER, "ssp", score=with_m.f1, detail=detail))
    return verdicts


class AnswerabilityCheck(Check):
    name, layer, per_record, uses_backend = "ssp", LAYER, False, True
    reasons = ("answerable_without_context", "not_answerable_with_context", "no_context")

    def start(self, ctx: CheckContext) -> None:
        if not ctx.documents and ctx.corpus is not None:
            ctx.documents = ctx.corpus().documents or {}

    def run(self, records, ctx: CheckContext) -> list[list[Verdict]]:
        o = ctx.options
        return [[v] for v in check_answerability(records.values, ctx.kind, ctx.backend, ctx.documents,
                                                  o.answer_distractors, o.answer_check_f1, o.seed)]

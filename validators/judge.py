"""Layer 3: an LLM judges every assistant turn of a trajectory, through the backend protocol.

One request per assistant turn (the conversation so far, the turn, and the message after
it), all turns of all records in one batched `backend.generate` call. The judge answers
`SCORE: <0-10>` and a reason; the record's score is its lowest turn score / 10. The model,
the prompt template, and every turn's filled prompt and raw reply are kept in the verdict detail.
A reply without a readable score makes the record a reject (`judge_unparseable`), unless
`lenient` (`--judge-lenient`: it passes, keeping that code); a record without an assistant
turn is a reject (`judge_no_turns`).
`JudgeCheck` is the layer's check (validators/check.py): it judges the records a sample rate
picks (deterministic by seed and record id), and with `--judge-sample N` only the first N of
them that reach the layer in record order (a resumed run counts the judge verdicts it
committed); the others get no judge verdict.
"""

from __future__ import annotations

import hashlib
import re

from generators.llm.base import ChatRequest
from validators.check import Check, CheckContext
from validators.verdict import Verdict, fail, ok

LAYER = "judge"
PROMPT = (
    "You review one assistant turn of a tool-using conversation. Judge four things: the assistant "
    "understood its input; the tool it calls fits what is needed; its <think> reasoning agrees with its "
    "action; its reasoning agrees with its answer. A mistake that the next turn corrects is acceptable.\n\n"
    "Question: {question}\n\nConversation so far:\n{history}\n\nTurn to judge:\n{turn}\n\nWhat came next:\n{after}\n\n"
    "Reply with one line 'SCORE: N' (N from 0 = wrong to 10 = right) and then one sentence of reason.")
JUDGED = "judge_judged"  # CheckContext.state: records judged so far in the run (--judge-sample)
_SCORE = re.compile(r"score\s*[:=]?\s*(\d+(?:\.\d+)?)", re.I)


def _clip(s: str, n: int = 600) -> str:
    return s if len(s) <= n else s[:n] + " ..."


def turn_prompts(row: dict) -> list[str]:
    msgs = [m for m in row.get("messages") or [] if isinstance(m, dict)]
    out = []
    for i, m in enumerate(msgs):
        if m.get("role") != "assistant":
            continue
        history = "\n".join(f"[{x.get('role')}] {_clip(str(x.get('content', '')), 300)}"
                            for x in msgs[:i] if x.get("role") != "system")
        after = f"[{msgs[i + 1].get('role')}] {_clip(str(msgs[i + 1].get('content', '')), 300)}" if i + 1 < len(msgs) else "(end)"
        out.append(PROMPT.format(question=row.get("question", ""), history=history or "(none)",
                                 turn=_clip(str(m.get("content", ""))), after=after))
    return out


def parse_score(text: str) -> float | None:
    m = _SCORE.search(text or "")
    if not m:
        return None
    return min(max(float(m.group(1)), 0.0), 10.0)


def judge_records(rows: list[dict], backend, threshold: float = 0.5, lenient: bool = False,
                  max_tokens: int = 48) -> list[Verdict]:
    """One Verdict per row (trajectories) from one batched backend call."""
    prompts = [turn_prompts(r) for r in rows]
    flat = [ChatRequest(messages=[{"role": "user", "content": p}], n=1, temperature=0.0, max_tokens=max_tokens)
            for ps in prompts for p in ps]
    outs = backend.generate(flat) if flat else []
    model = str(backend.model or "?")
    verdicts, k = [], 0
    for ps in prompts:
        replies = [outs[k + j][0].text for j in range(len(ps))]
        k += len(ps)
        scores = [parse_score(t) for t in replies]
        detail = {"model": model, "prompt_template": PROMPT,
                  "turns": [{"score": s, "reply": t[:300], "prompt": p} for s, t, p in zip(scores, replies, ps)]}
        known = [s for s in scores if s is not None]
        if not ps:
            verdicts.append(fail(LAYER, "turns", "judge_no_turns", detail=detail))
        elif len(known) < len(scores):
            score = min(known) / 10 if known else None
            if lenient:
                verdicts.append(ok(LAYER, "turns", reason="judge_unparseable", score=score, detail=detail))
            else:
                verdicts.append(fail(LAYER, "turns", "judge_unparseable", score=score, detail=detail))
        elif min(known) / 10 < threshold:
            verdicts.append(fail(LAYER, "turns", "judge_low_score", score=min(known) / 10, detail=detail))
        else:
            verdicts.append(ok(LAYER, "turns", score=min(known) / 10, detail=detail))
    return verdicts


def sampled(record_id: str, seed: int, rate: float) -> bool:
    """Whether the judge looks at this record (a deterministic fraction `rate` of ids)."""
    if rate >= 1.0:
        return True
    return int(hashlib.sha256(f"{seed}|{record_id}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < rate


class JudgeCheck(Check):
    name, layer, kinds, per_record, uses_backend = "turns", LAYER, ("trajectories",), False, True
    reasons = ("judge_low_score", "judge_unparseable", "judge_no_turns")

    def run(self, records, ctx: CheckContext) -> list[list[Verdict]]:
        o = ctx.options
        chosen = [i for i, rid in enumerate(records.ids) if sampled(rid, o.seed, o.judge_sample_rate)]
        if o.judge_sample > 0:  # the first N the rate picks, in record order, over the whole run
            chosen = chosen[:max(0, o.judge_sample - ctx.state.get(JUDGED, 0))]
            ctx.state[JUDGED] = ctx.state.get(JUDGED, 0) + len(chosen)
        values = records.values
        out: list[list[Verdict]] = [[] for _ in records.ids]
        for i, v in zip(chosen, judge_records([values[i] for i in chosen], ctx.backend, o.judge_threshold,
                                              o.judge_lenient, o.judge_max_tokens)):
            out[i] = [v]
        return out

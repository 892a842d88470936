"""Each question the corpus question builder writes is checked before it is kept.

In order, the first failing check is the candidate's reject (reason codes in
validators/reasons.py):
  question_unparseable        the model's reply holds no question
  question_skips_hop          the hops author's parts do not link (validators/chain_authors.py)
  answer_not_in_last_passage  the answer is not in the chain's last passage (the model gave another)
  answer_in_question          the question contains the answer (question_rules' leak rule)
  not_answerable_with_chain   a reader given the chain's passages, in order, does not answer it
  answerable_from_last_passage  the reader answers it from the last passage alone (no hops needed)
  answerable_without_chain    the reader answers it from the retriever's top-k for the question
                              with the chain's passages left out (a shortcut around the chain)
A question written hop by hop (`Candidate.hops`) is read hop by hop for the first check: the
reader, given one passage of the chain, answers that hop's part (the last hop's question from
the last passage; "What is <phrase>?" from the passage a link's phrase comes from, whose answer
is the name it stands for), and every part must be answered, as a composed question is
answered by following its chain (MuSiQue's check of its compositions); the two shortcut checks
read the composed question. The reader is the builder's backend, greedy; all reader prompts of
a chunk go in one batch. "Answers" is exact match or token F1 >= `min_f1` against the answer
(generators/answers.py). A verdict's detail keeps the reader's replies (the parts' joined by
" | ") and, for a composed question, each part with its reply.

    verdicts = verify(candidates, finder, backend, k=5)   # one Verdict per candidate
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from generators.answers import match
from generators.corpus.chain_prompts import parse_reader, reader_messages
from generators.corpus.chains import Chain, ChainFinder, contains
from generators.llm.base import ChatRequest
from validators.verdict import Reject, Verdict, fail, ok

CHECK = "chain_question"
REASONS = ("question_unparseable", "question_skips_hop", "answer_not_in_last_passage", "answer_in_question",
           "not_answerable_with_chain", "answerable_from_last_passage", "answerable_without_chain")


@dataclass
class Candidate:
    chain: Chain
    question: str | None
    answer: str
    reply: str = ""
    skipped: dict | None = None  # which part of a composed question does not link (its detail)
    hops: list[tuple[int, str, str]] | None = None  # composed: (passage index, part's question, its answer)


def rules(c: Candidate) -> None:
    """The program's checks; raises Reject."""
    if c.skipped:
        raise Reject("question_skips_hop", **c.skipped)
    if not c.question:
        raise Reject("question_unparseable", reply=c.reply[:200])
    if not contains(c.chain.passages[-1].text, c.answer):
        raise Reject("answer_not_in_last_passage", answer=c.answer[:200])
    if contains(c.question, c.answer):
        raise Reject("answer_in_question", answer=c.answer[:200])


def verify(cands: list[Candidate], finder: ChainFinder, reader, k: int = 5, min_f1: float = 0.5,
           max_tokens: int = 24) -> list[Verdict]:
    verdicts: list[Verdict | None] = []
    asked: list[int] = []
    for i, c in enumerate(cands):
        try:
            rules(c)
            verdicts.append(None)
            asked.append(i)
        except Reject as r:
            verdicts.append(fail("rules", CHECK, r.reason, detail=detail(c, r.detail)))
    if not asked:
        return verdicts  # type: ignore[return-value]
    index = finder.index()
    mask = np.ones(len(finder.passages), bool)
    prompts, spans = [], []
    for i in asked:
        c = cands[i]
        chain = [(p.title, p.text) for p in c.chain.passages]
        exclude = [finder.pos[d] for d in c.chain.doc_ids]
        top = index.top(index.score(c.question), mask, exclude, k)
        parts = c.hops or [(None, c.question, c.answer)]
        spans.append((len(prompts), parts))
        prompts += [reader_messages(chain if at is None else [chain[at]], q) for at, q, _ in parts]
        prompts += [reader_messages(chain[-1:], c.question),
                    reader_messages([(finder.passages[j].title, finder.passages[j].text) for j in top], c.question)]
    outs = reader.generate([ChatRequest(messages=m, n=1, temperature=0.0, max_tokens=max_tokens) for m in prompts])

    def read(at: int, answer: str) -> tuple[str, float, bool]:
        reply = parse_reader(outs[at][0].text)
        m = match(reply, answer)
        return reply, m.f1, m.em or m.f1 >= min_f1

    for (start, parts), i in zip(spans, asked):
        c = cands[i]
        with_chain = [read(start + j, a) for j, (_, _, a) in enumerate(parts)]
        shortcuts = [read(start + len(parts) + j, c.answer) for j in range(2)]
        f1 = [min(f for _, f, _ in with_chain)] + [f for _, f, _ in shortcuts]
        d = detail(c, {"reader": [" | ".join(r for r, _, _ in with_chain)] + [r for r, _, _ in shortcuts],
                       "f1": [round(f, 3) for f in f1]})
        if c.hops:
            d["parts"] = [{"question": q, "answer": a, "reply": r} for (_, q, a), (r, _, _) in zip(parts, with_chain)]
        if not all(h for _, _, h in with_chain):
            verdicts[i] = fail("answerability", CHECK, "not_answerable_with_chain", score=f1[0], detail=d)
        elif shortcuts[0][2]:
            verdicts[i] = fail("answerability", CHECK, "answerable_from_last_passage", score=f1[1], detail=d)
        elif shortcuts[1][2]:
            verdicts[i] = fail("answerability", CHECK, "answerable_without_chain", score=f1[2], detail=d)
        else:
            verdicts[i] = ok("answerability", CHECK, score=f1[0], detail=d)
    return verdicts  # type: ignore[return-value]


def detail(c: Candidate, extra: dict | None = None) -> dict:
    """What a verdict keeps of its candidate, so a reject can be read back whole."""
    return {"question": c.question, "answer": c.answer, "doc_ids": c.chain.doc_ids,
            "links": [{"name": n, "via": v} for n, v in zip(c.chain.names, c.chain.vias)], **(extra or {})}

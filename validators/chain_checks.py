"""Each question the corpus question builder writes is checked before it is kept.

In order, the first failing check is the candidate's reject (reason codes in
validators/reasons.py):
  question_unparseable        the model's reply holds no question
  answer_not_in_last_passage  the answer is not in the chain's last passage (the model gave another)
  answer_in_question          the question contains the answer (question_rules' leak rule)
  not_answerable_with_chain   a reader given the chain's passages, in order, does not answer it
  answerable_from_last_passage  the reader answers it from the last passage alone (no hops needed)
  answerable_without_chain    the reader answers it from the retriever's top-k for the question
                              with the chain's passages left out (a shortcut around the chain)
The reader is the builder's backend, greedy; all three reader prompts of a chunk go in one
batch. "Answers" is exact match or token F1 >= `min_f1` against the answer (generators/answers.py).

    verdicts = verify(candidates, finder, backend, k=5)   # one Verdict per candidate
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from generators.answers import match
from generators.corpus.chain_prompts import parse_reader, reader_prompt
from generators.corpus.chains import Chain, ChainFinder, contains
from generators.llm.base import ChatRequest
from validators.verdict import Reject, Verdict, fail, ok

CHECK = "chain_question"
REASONS = ("question_unparseable", "answer_not_in_last_passage", "answer_in_question", "not_answerable_with_chain",
           "answerable_from_last_passage", "answerable_without_chain")


@dataclass
class Candidate:
    chain: Chain
    question: str | None
    answer: str
    reply: str = ""


def rules(c: Candidate) -> None:
    """The program's checks; raises Reject."""
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
    prompts = []
    for i in asked:
        c = cands[i]
        chain = [(p.title, p.text) for p in c.chain.passages]
        exclude = [finder.pos[d] for d in c.chain.doc_ids]
        top = index.top(index.score(c.question), mask, exclude, k)
        prompts += [reader_prompt(chain, c.question), reader_prompt(chain[-1:], c.question),
                    reader_prompt([(finder.passages[j].title, finder.passages[j].text) for j in top], c.question)]
    outs = reader.generate([ChatRequest(messages=[{"role": "user", "content": p}], n=1, temperature=0.0,
                                        max_tokens=max_tokens) for p in prompts])
    for n, i in enumerate(asked):
        c = cands[i]
        replies = [parse_reader(outs[3 * n + j][0].text) for j in range(3)]
        scores = [match(r, c.answer) for r in replies]
        hit = [m.em or m.f1 >= min_f1 for m in scores]
        d = detail(c, {"reader": replies, "f1": [round(m.f1, 3) for m in scores]})
        if not hit[0]:
            verdicts[i] = fail("answerability", CHECK, "not_answerable_with_chain", score=scores[0].f1, detail=d)
        elif hit[1]:
            verdicts[i] = fail("answerability", CHECK, "answerable_from_last_passage", score=scores[1].f1, detail=d)
        elif hit[2]:
            verdicts[i] = fail("answerability", CHECK, "answerable_without_chain", score=scores[2].f1, detail=d)
        else:
            verdicts[i] = ok("answerability", CHECK, score=scores[0].f1, detail=d)
    return verdicts  # type: ignore[return-value]


def detail(c: Candidate, extra: dict | None = None) -> dict:
    """What a verdict keeps of its candidate, so a reject can be read back whole."""
    return {"question": c.question, "answer": c.answer, "doc_ids": c.chain.doc_ids,
            "links": [{"name": n, "via": v} for n, v in zip(c.chain.names, c.chain.vias)], **(extra or {})}

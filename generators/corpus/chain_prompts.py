"""What the model is asked when it writes a chain's question and when it reads one.

The author prompt renders the chain's question construction path (start page, then each
search with the page it found and the note on why) and the answer the program picked from
the last page; the model replies `<question>...</question>`, and may correct the answer
with `<answer>...</answer>` (it is then checked like the program's). The reader prompt
gives passages and a question and asks for `<answer>...</answer>`.

    prompt = author_prompt(chain)
    question, answer = parse_author(reply, chain.answer)   # question None: unparseable
    reader_prompt([(title, text), ...], question)
"""

from __future__ import annotations

import re

from generators.corpus.chains import Chain, snippet
from generators.llm.toolcalls import extract_answer

AUTHOR_HEAD = "Write one multi-hop question from this question construction path."
AUTHOR = (AUTHOR_HEAD + " The question starts from the first page, needs every step to be answered, and its "
          "answer is the answer given below. Never write the answer in the question.\n\n"
          "Start page: [{start}] {start_text}\n{steps}\nAnswer: {answer}\n\n"
          "Reply with the question inside <question></question>.")
READER_HEAD = "Read the passages and answer the question."
READER = (READER_HEAD + " Reply with only the answer inside <answer></answer>, or <answer>unknown</answer> "
          "if the passages do not tell.\n\n{passages}\n\nQuestion: {question}")
_QUESTION = re.compile(r"<question>(.*?)</question>", re.S | re.I)


def author_prompt(chain: Chain) -> str:
    qcp, first = chain.qcp, chain.passages[0]
    lines = []
    for i, step in enumerate(qcp.steps, 1):
        lines.append(f"Step {i}. Search: {step.query} ({step.note})")
        lines += [f"  [{chain.passages[i].title}] {p}" for p in step.passages]
    return AUTHOR.format(start=first.title, start_text=snippet(first.text), steps="\n".join(lines),
                         answer=chain.answer)


def parse_author(text: str, answer: str) -> tuple[str | None, str]:
    """(question, answer) of an author reply: the tagged question, else the first line that
    ends with "?"; the tagged answer if the reply gives one, else `answer`."""
    text = text or ""
    m = _QUESTION.search(text)
    question = m.group(1).strip() if m else None
    if question is None:
        question = next((ln.strip() for ln in text.splitlines() if ln.strip().endswith("?")), None)
    given, _ = extract_answer(text)
    given = (given or "").strip()
    if question is not None and (len(question.split()) < 3 or "<" in question):
        question = None
    return question, given or answer


def reader_prompt(passages: list[tuple[str, str]], question: str) -> str:
    body = "\n\n".join(f"[{t}] {snippet(x)}" for t, x in passages) or "(no passages)"
    return READER.format(passages=body, question=question)


def parse_reader(text: str) -> str:
    a, _ = extract_answer(text or "")
    return (a if a is not None else (text or "").strip().split("\n")[0]).strip()

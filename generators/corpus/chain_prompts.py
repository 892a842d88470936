"""What the model is asked when it writes a chain's question and when it reads one.

The author prompt renders the chain's question construction path as numbered pages (the
seed passage, then each search's query and the passage it found) and the answer the
program picked from the last page, after one worked example (a 135M model writes a
question only when shown one); the model replies with the question (plain, or inside
`<question></question>`), and may correct the answer with `<answer>...</answer>` (it is
then checked like the program's). The reader prompt
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
AUTHOR = (AUTHOR_HEAD + " It starts at page 1; each next page was found by searching a name the page before "
          "mentions; the answer is on the last page. The question names what page 1 is about, not the last page's "
          "title, so it needs every page. Write only the question; it must not contain the answer.\n\n"
          "Example.\nPage 1 [Rivo]: Rivo is a painter born in Lusk.\n"
          "Page 2 [Lusk] (found by searching \"Lusk\"): Lusk is a port founded in 1410.\n"
          "Answer: 1410\nQuestion: In what year was the birthplace of Rivo founded?\n\n"
          "Example.\nPage 1 [Tam Guild]: Tam Guild is a bakery founded by Ora Lind.\n"
          "Page 2 [Ora Lind] (found by searching \"Ora Lind\"): Ora Lind married Bo Fenn in 1900.\n"
          "Answer: Bo Fenn\nQuestion: Whom did the founder of Tam Guild marry?\n\n"
          "Now these pages.\n{pages}\nAnswer: {answer}\nQuestion:")
READER_HEAD = "Read the passages and answer the question."
READER = (READER_HEAD + " Reply with only the answer inside <answer></answer>, or <answer>unknown</answer> "
          "if the passages do not tell.\n\nExample.\n[Lusk] Lusk is a port founded in 1410.\n"
          "Question: When was Lusk founded?\n<answer>1410</answer>\n\nNow these passages.\n{passages}\n\n"
          "Question: {question}")
_SAID = re.compile(r"^\s*(?:the\s+)?answer(?:\s+to\s+(?:this|the)\s+question)?\s+is\s*:?\s*", re.I)
_PREFIX = re.compile(r"^\s*(?:question\s*:)?\s*", re.I)
_QUESTION = re.compile(r"<question>(.*?)</question>", re.S | re.I)


def author_prompt(chain: Chain) -> str:
    """The chain's QCP as pages: its seed passage, then each step's search and the passage found."""
    qcp, first = chain.qcp, chain.passages[0]
    pages = [f"Page 1 [{first.title}]: {snippet(first.text)}"]
    for i, step in enumerate(qcp.steps, 2):
        pages += [f"Page {i} [{chain.passages[i - 1].title}] (found by searching \"{step.query}\"): {p}"
                  for p in step.passages]
    return AUTHOR.format(pages="\n".join(pages), answer=chain.answer)


def parse_author(text: str, answer: str) -> tuple[str | None, str]:
    """(question, answer) of an author reply: the tagged question, else the first line that
    ends with "?"; the tagged answer if the reply gives one, else `answer`."""
    text = text or ""
    m = _QUESTION.search(text)
    question = m.group(1).strip() if m else None
    if question is None:
        question = next((_PREFIX.sub("", ln).strip() for ln in text.splitlines() if ln.strip().endswith("?")), None)
    given, _ = extract_answer(text)
    given = (given or "").strip()
    if question is not None and (len(question.split()) < 3 or "<" in question):
        question = None
    return question, given or answer


def reader_prompt(passages: list[tuple[str, str]], question: str) -> str:
    body = "\n\n".join(f"[{t}] {snippet(x)}" for t, x in passages) or "(no passages)"
    return READER.format(passages=body, question=question)


def parse_reader(text: str) -> str:
    """The tagged answer, else the reply's first line without a leading "The answer is:"."""
    a, _ = extract_answer(text or "")
    if a is None:
        a = _SAID.sub("", (text or "").strip().split("\n")[0]).rstrip(".")
    return a.strip()

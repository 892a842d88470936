"""What the model is asked when it writes a chain's question and when it reads one.

Two ways to write a chain's question (validators/chain_authors.py picks one):
  path   one prompt renders the chain's question construction path as numbered pages (the
         seed passage, then each search's query and the passage it found) and the answer the
         program picked from the last page, after two worked examples; the model replies with
         the question (plain, or inside `<question></question>`), and may correct the answer
         with `<answer>...</answer>` (it is then checked like the program's). For a model that
         can write a multi-hop question at once (a served one).
  hops   short prompts, one per hop, each with worked examples as earlier chat turns: a
         question about the last page's sentence whose answer is the answer
         (`hop_question_messages`), and for each link a phrase that names the linked page by
         what the page before says of it (`link_phrase_messages`: "the birthplace of Rivo");
         the program puts each phrase in place of the name it stands for
         (validators/chain_authors.py). Within reach of the embedded 135M model.
The reader is asked the same way (`reader_messages`: the passages and the question, worked
examples as earlier turns) and replies with a short answer.

    messages = hop_question_messages(title, sentence, answer)
    phrase = parse_phrase(reply, name)            # None: no phrase, or it writes the name
    reader_messages([(title, text), ...], question)
"""

from __future__ import annotations

import re

from generators.corpus.chains import Chain, contains, snippet
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
READER = READER_HEAD + " Reply with a short answer copied from the passages (a name, a place or a year)."
READER_SHOTS = (  # (passages, question, answer): the reader's worked examples
    ("[Lusk] Lusk is a port founded in 1410 by Ada Fay. It has a lighthouse.", "Who founded Lusk?", "Ada Fay"),
    ("[Rivo] Rivo is a painter born in Lusk. Rivo married Bo Fenn.", "What is the birthplace of Rivo?", "Lusk"),
    ("[Tam Guild] Tam Guild is a bakery in Orr. It was founded by Ora Lind in 1900.", "What is the founder of Tam Guild?",
     "Ora Lind"))
HOP_QUESTION = ("Write a question about the page's sentence whose answer is the given answer. Name the page's "
                "subject; never write the answer. Reply with the question only.")
HOP_SHOTS = (  # (page, sentence, answer, question)
    ("Lusk", "Lusk is a port founded in 1410.", "1410", "In what year was Lusk founded?"),
    ("Ora Lind", "Ora Lind married Bo Fenn in 1900.", "Bo Fenn", "Whom did Ora Lind marry?"),
    ("Tam Guild", "It was founded by Ora Lind.", "Ora Lind", "Who founded Tam Guild?"),
    ("Rivo", "Rivo is a painter born in Lusk.", "Lusk", "Where was Rivo born?"))
LINK_PHRASE = ("Write a short phrase that names the given name by what the sentence says of it, without writing "
               "the name. Reply with the phrase only.")
LINK_SHOTS = (  # (page, sentence, name, phrase)
    ("Rivo", "Rivo is a painter born in Lusk.", "Lusk", "the birthplace of Rivo"),
    ("Tam Guild", "It was founded by Ora Lind.", "Ora Lind", "the founder of Tam Guild"),
    ("Ora Lind", "Ora Lind married Bo Fenn in 1900.", "Bo Fenn", "the spouse of Ora Lind"),
    ("Vex Mill", "Vex Mill is a mill based in Orr.", "Orr", "the town where Vex Mill is based"))
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


def _shots(system: str, shots, user) -> list[dict]:
    """A system message, each worked example as a user turn and the assistant's reply, then
    the last user turn (`user` renders a shot's fields but its last)."""
    messages = [{"role": "system", "content": system}]
    for *fields, reply in shots:
        messages += [{"role": "user", "content": user(*fields)}, {"role": "assistant", "content": reply}]
    return messages


def _page(label: str):
    return lambda page, sentence, value: f"Page: {page}\nSentence: {sentence}\n{label}: {value}"


def hop_question_messages(page: str, sentence: str, answer: str) -> list[dict]:
    """Ask for a question about `sentence` (of page `page`) whose answer is `answer`."""
    return _shots(HOP_QUESTION, HOP_SHOTS, _page("Answer")) + [
        {"role": "user", "content": _page("Answer")(page, sentence, answer)}]


def link_phrase_messages(page: str, sentence: str, name: str) -> list[dict]:
    """Ask for a phrase that names `name` by what `sentence` (of page `page`) says of it."""
    return _shots(LINK_PHRASE, LINK_SHOTS, _page("Name")) + [{"role": "user", "content": _page("Name")(page, sentence, name)}]


def reader_messages(passages: list[tuple[str, str]], question: str) -> list[dict]:
    """Ask a reader to answer `question` from `passages` ((title, text), in order)."""
    user = lambda body, q: f"{body}\n\nQuestion: {q}"  # noqa: E731
    body = "\n\n".join(f"[{t}] {snippet(x)}" for t, x in passages) or "(no passages)"
    return _shots(READER, READER_SHOTS, user) + [{"role": "user", "content": user(body, question)}]


_TAIL = r"(?:\s+(?:is|was|are|were|in|at|by|named|called)|,)\s+(?:the\s+)?{name}\W*$"


def parse_phrase(text: str, name: str) -> str | None:
    """The phrase of a link reply: its first line, a closing "... is <name>" cut off; None when
    it is empty, long (over 24 words) or still writes `name`."""
    line = (text or "").strip().split("\n")[0].strip()
    if len(line) > 1 and line[0] == line[-1] == '"':
        line = line[1:-1]
    line = re.sub(_TAIL.format(name=re.escape(name)), "", line, flags=re.I).rstrip(" .,;:")
    if not line or len(line.split()) > 24 or contains(line, name):
        return None
    first, _, rest = line.partition(" ")
    return f"{first.lower()} {rest}" if first in ("The", "A", "An") and rest else line


def parse_reader(text: str) -> str:
    """The tagged answer, else the reply's first line without a leading "The answer is:"."""
    a, _ = extract_answer(text or "")
    if a is None:
        a = _SAID.sub("", (text or "").strip().split("\n")[0]).rstrip(".")
    return a.strip()

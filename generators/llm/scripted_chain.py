"""The scripted stand-in's replies to the corpus question builder's two prompts
(generators/corpus/chain_prompts.py), so its tests run the whole builder without a model.

Author: a cloze question that names the start page and blanks the answer in its sentence of
the last page ('Starting from "A" and following the pages it mentions, what fills the blank
in "... ___ ..."?'). Chosen by a hash of the prompt, so the same chain always gets the same
reply, some replies are bad on purpose: one writes the answer into the question, one starts
from the last page (answerable from it alone), one gives an answer that is in no page, one
is not a question.

Reader: follows the question: from the quoted start page (it must be among the passages)
it reaches the passages whose title or named span that page (or a page reached) mentions,
and fills the blank from their text; "unknown" when it cannot. It needs the chain's hops
exactly when the question does.
"""

from __future__ import annotations

import hashlib
import re

AUTHOR_HEAD = "Write one multi-hop question from this question construction path."
READER_HEAD = "Read the passages and answer the question."
INVENTED = "Quentin Zarvox"
_PAGE = re.compile(r"^\s*\[([^\]]*)\] (.*)$", re.M)
_AUTHOR_PAGE = re.compile(r'^Page \d+ \[([^\]]*)\](?: \(found by searching "[^"]*"\))?: (.*)$', re.M)
_SPAN = re.compile(r"[A-Z][\w'-]*(?:\s+(?:of\s+|the\s+)?[A-Z][\w'-]*)+")


def scripted_chain_text(prompt: str) -> str | None:
    """The reply to a builder prompt, None for any other prompt."""
    if prompt.startswith(AUTHOR_HEAD):
        return _author(prompt)
    if prompt.startswith(READER_HEAD):
        return _reader(prompt)
    return None


def _author(prompt: str) -> str:
    own = prompt.split("\nNow these pages.\n")[-1]  # past the worked example
    answer = re.search(r"^Answer: (.+)$", own, re.M)
    pages = _AUTHOR_PAGE.findall(own)
    if not (answer and pages):
        return "I cannot write a question for this."
    answer, (last_title, last_text) = answer.group(1).strip(), pages[-1]
    sentence = next((s for s in re.split(r"(?<=[.!?])\s+", last_text) if answer in s), "")
    masked = sentence.replace(answer, "___", 1).rstrip(".")
    variant = int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % 8
    first = pages[0][0]
    question = f'Starting from "{first}" and following the pages it mentions, what fills the blank in "{masked}"?'
    if variant == 1:
        return f"<question>{question[:-1]}, {answer}?</question>"
    if variant == 3:
        return f'<question>Starting from "{last_title}", what fills the blank in "{masked}"?</question>'
    if variant == 5:
        return f"<question>{question}</question>\n<answer>{INVENTED}</answer>"
    if variant == 7:
        return "This path is about several pages."
    return f"<question>{question}</question>"


def _reader(prompt: str) -> str:
    body, _, question = prompt.split("\nNow these passages.\n")[-1].rpartition("\nQuestion: ")
    pages = {t: x for t, x in _PAGE.findall(body)}
    start = re.search(r'"([^"]+)"', question)
    blank = re.search(r'blank in "(.*)"\?', question)
    if not (start and blank) or start.group(1) not in pages:
        return "<answer>unknown</answer>"
    reached, todo = [start.group(1)], [start.group(1)]
    while todo:
        text = pages[todo.pop(0)]
        names = set(_SPAN.findall(text))
        for title, other in pages.items():
            if title not in reached and (title in text or names & set(_SPAN.findall(other))):
                reached.append(title)
                todo.append(title)
    pattern = re.compile(re.escape(blank.group(1)).replace("___", "(.+?)") + r"(?=[.!?]|$)", re.M)
    for title in reached:
        m = pattern.search(pages[title].replace("...", ""))
        if m:
            return f"<answer>{m.group(1).strip()}</answer>"
    return "<answer>unknown</answer>"

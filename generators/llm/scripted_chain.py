"""The scripted stand-in's replies to the corpus question builder's prompts
(generators/corpus/chain_prompts.py), so its tests run the whole builder without a model.

Author, whole path: a cloze question that names the start page and blanks the answer in its
sentence of the last page ('Starting from "A" and following the pages it mentions, what fills
the blank in "... ___ ..."?'). Author, hop by hop: the last hop's question 'On the page of
B, what fills the blank in "... ___ ..."?' and each link's phrase 'the name that A's page
fills in "... ___ ..."', which the builder puts together. Chosen by a hash of the prompt,
so the same chain always gets the same reply, some replies are bad on purpose: one writes
the answer into the question, one starts from the last page (answerable from it alone; hop
by hop: a question that does not name its page), one gives an answer that is in no page
(whole path only), one is not a question.

Reader: follows the question: from the start page (the first of the passages' titles the
question names before its last "fills") it reaches the passages whose title or named span
that page (or a page reached) mentions, and fills the blank from their text; "unknown" when
it cannot. It needs the chain's hops exactly when the question does.
"""

from __future__ import annotations

import hashlib
import re

AUTHOR_HEAD = "Write one multi-hop question from this question construction path."
READER_HEAD = "Read the passages and answer the question."
HOP_QUESTION_HEAD = "Write a question about the page's sentence"
LINK_PHRASE_HEAD = "Write a short phrase that names the given name"
INVENTED = "Quentin Zarvox"
_PAGE = re.compile(r"^\s*\[([^\]]*)\] (.*)$", re.M)
_AUTHOR_PAGE = re.compile(r'^Page \d+ \[([^\]]*)\](?: \(found by searching "[^"]*"\))?: (.*)$', re.M)
_SPAN = re.compile(r"[A-Z][\w'-]*(?:\s+(?:of\s+|the\s+)?[A-Z][\w'-]*)+")


def scripted_chain_text(messages: list[dict]) -> str | None:
    """The reply to a builder conversation (its first message says which), None for any other."""
    first, last = (str(messages[k].get("content") or "") for k in (0, -1))
    if first.startswith(AUTHOR_HEAD):
        return _author(first)
    if first.startswith(READER_HEAD):
        return _reader(last)
    if first.startswith(HOP_QUESTION_HEAD):
        return _hop_question(last)
    if first.startswith(LINK_PHRASE_HEAD):
        fields = dict(re.findall(r"^(Page|Sentence|Name): (.*)$", last, re.M))
        masked = _blank(fields.get("Sentence", ""), fields.get("Name", ""))
        return f'the name that {fields.get("Page", "")}\'s page fills in "{masked}"'
    return None


def _blank(sentence: str, span: str) -> str:
    """`sentence` with its first `span` blanked ("___"), its closing period dropped."""
    return sentence.replace(span, "___", 1).rstrip(".")


def _variant(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % 8


def _hop_question(prompt: str) -> str:
    fields = dict(re.findall(r"^(Page|Sentence|Answer): (.*)$", prompt, re.M))
    page, sentence, answer = fields.get("Page", ""), fields.get("Sentence", ""), fields.get("Answer", "")
    masked = _blank(sentence, answer)
    variant = _variant(prompt)
    if variant == 1:
        return f'On the page of {page}, what fills the blank in "{masked}", {answer}?'
    if variant == 3:
        return f'What fills the blank in "{masked.replace(page, "it")}"?'
    if variant == 7:
        return "This sentence is about a page."
    return f'On the page of {page}, what fills the blank in "{masked}"?'


def _author(prompt: str) -> str:
    own = prompt.split("\nNow these pages.\n")[-1]  # past the worked example
    answer = re.search(r"^Answer: (.+)$", own, re.M)
    pages = _AUTHOR_PAGE.findall(own)
    if not (answer and pages):
        return "I cannot write a question for this."
    answer, (last_title, last_text) = answer.group(1).strip(), pages[-1]
    sentence = next((s for s in re.split(r"(?<=[.!?])\s+", last_text) if answer in s), "")
    masked = _blank(sentence, answer)
    variant = _variant(prompt)
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
    body, _, question = prompt.rpartition("\n\nQuestion: ")
    pages = {t: x for t, x in _PAGE.findall(body)}
    prefix, _, _ = question.rpartition("fills")
    start = min((t for t in pages if t and t in prefix), key=prefix.find, default=None)
    blank = re.search(r'fills (?:the blank )?in "([^"]*)"\?$', question)
    if not (start and blank):
        return "unknown"
    reached, todo = [start], [start]
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
            return m.group(1).strip()
    return "unknown"

"""Who writes a chain's question in `forgeplay corpus questions` (`--author`): one function
per way, `write(chains, backend, max_tokens, samples) -> list[Candidate]`, and the `AUTHORS`
registry.

  hops  (default) the model writes a question about the last page's sentence whose answer
        is the chain's answer, and for each link a phrase that names the linked page by what
        the page before says of it; the program puts each phrase in place of the name it
        stands for, last link first: "Who founded Dunmore Cross?" and "the birthplace of
        Juniper Hale" give "Who founded the birthplace of Juniper Hale?" (the reader then checks
        each part on its own passage: validators/chain_checks.py). Each part is asked
        greedily and, with `samples` > 1, sampled `samples` - 1 more times (temperature 0.8,
        seeded by the chain); the first reply that links is taken: the question must name the
        page it reaches through and not the answer, a phrase must name the page before and
        not the page it stands for. A chain with a link its sentence does not name (a
        retriever's neighbour) or a part with no such reply is a `question_skips_hop` reject.
  path  the model writes the whole question from the chain's question construction path in
        one greedy reply (and may correct the answer): for a model that can.
Prompts: generators/corpus/chain_prompts.py. Every request of a chunk goes in one batch.

    cands = AUTHORS["hops"](chains, backend, max_tokens=64, samples=4)
"""

from __future__ import annotations

import re

from generators.corpus.chain_prompts import (author_prompt, hop_question_messages, link_phrase_messages,
                                             parse_author, parse_phrase)
from generators.corpus.chains import STOP_FIRST, Chain, contains
from generators.llm.base import ChatRequest
from validators.chain_checks import Candidate

SAMPLED = 0.8  # temperature of the replies after the greedy one


def _ask(backend, conversations: list[list[dict]], max_tokens: int, samples: int = 1,
         seeds: list[int] | None = None) -> list[list[str]]:
    """Per conversation its greedy reply, then `samples` - 1 sampled ones (all in one batch)."""
    reqs = [ChatRequest(messages=m, n=1, temperature=0.0, max_tokens=max_tokens) for m in conversations]
    if samples > 1:
        reqs += [ChatRequest(messages=m, n=samples - 1, temperature=SAMPLED, max_tokens=max_tokens, seed=seed)
                 for m, seed in zip(conversations, seeds or [0] * len(conversations))]
    outs = backend.generate(reqs)
    k = len(conversations)
    return [[outs[i][0].text] + ([o.text for o in outs[k + i]] if samples > 1 else []) for i in range(k)]


def path(chains: list[Chain], backend, max_tokens: int, samples: int = 1) -> list[Candidate]:
    asks = [[{"role": "user", "content": author_prompt(c)}] for c in chains]
    replies = [r[0] for r in _ask(backend, asks, max_tokens)]
    return [Candidate(c, *parse_author(r, c.answer), r) for c, r in zip(chains, replies)]


def _replace(text: str, name: str, phrase: str) -> str:
    """`text` with its first whole-word `name` (any case) replaced by `phrase`."""
    return re.sub(rf"(?<!\w){re.escape(name)}(?!\w)", lambda _: phrase, text, count=1, flags=re.I)


def _anchors(chain: Chain, i: int) -> list[str]:
    """What link `i`'s phrase must name: the name that led to page `i`; for the first page its
    title or a word of it a text may call it by ("Bettany" for "Bettany Crale")."""
    if i:
        return [chain.names[i - 1]]
    title = chain.passages[0].title
    return [title] + [w for w in title.split() if len(w) > 2 and w[0].isupper() and w not in STOP_FIRST]


def hops(chains: list[Chain], backend, max_tokens: int, samples: int = 1) -> list[Candidate]:
    unnamed = [_unnamed(c) for c in chains]
    asks, seeds = [], []
    for c in (c for c, u in zip(chains, unnamed) if u is None):
        seed = int(c.chain_id[:8], 16)
        asks.append(hop_question_messages(c.passages[-1].title, c.sentences[-1], c.answer))
        asks += [link_phrase_messages(c.passages[i].title, c.sentences[i], c.names[i]) for i in range(len(c.names))]
        seeds += [seed + i for i in range(len(c.names) + 1)]
    replies = iter(_ask(backend, asks, max_tokens, samples, seeds) if asks else [])
    out = []
    for c, u in zip(chains, unnamed):
        if u is not None:
            out.append(Candidate(c, "", c.answer, skipped=u))
            continue
        said = [next(replies) for _ in range(len(c.names) + 1)]
        question = _question(c, said[0])
        phrases = [_phrase(c, i, r) for i, r in enumerate(said[1:])]
        parts = {"hop_question": question, "phrases": phrases}
        skipped = _skip(c, question, phrases) if question is not None else None
        read = None
        if question is not None and skipped is None:
            read = [(i, f"What is {p}?", name) for i, (p, name) in enumerate(zip(phrases, c.names))]
            read.append((len(c.names), question, c.answer))
            composed = phrases[0]
            for i in range(1, len(phrases)):
                composed = _replace(phrases[i], c.names[i - 1], composed)
            question = _replace(question, c.names[-1], composed)
        text = "\n".join(r[0] for r in said)
        out.append(Candidate(c, question, c.answer, text, skipped={**skipped, **parts} if skipped else None, hops=read))
    return out


def _question(chain: Chain, replies: list[str]) -> str | None:
    """The first reply's question that names the last link and not the answer, else the first
    question (rejected later), else None. The program's answer stands."""
    questions = [q for q in (parse_author(r, chain.answer)[0] for r in replies) if q]
    return next((q for q in questions if contains(q, chain.names[-1]) and not contains(q, chain.answer)),
                questions[0] if questions else None)


def _phrase(chain: Chain, i: int, replies: list[str]) -> str | None:
    """The first reply's phrase for link `i` that names the page before, else the greedy one's."""
    name = chain.names[i]
    return next((p for p in (parse_phrase(r, name) for r in replies) if p and _anchored(p, chain, i)),
                parse_phrase(replies[0], name))


def _unnamed(chain: Chain) -> dict | None:
    """The first link whose sentence does not name where it leads (no phrase can say it)."""
    for i, (name, sentence) in enumerate(zip(chain.names, chain.sentences)):
        if not contains(sentence, name):
            return {"hop": i, "part": "link", "needs": name}
    return None


def _anchored(phrase: str, chain: Chain, i: int) -> bool:
    return any(contains(phrase, a) for a in _anchors(chain, i))


def _skip(chain: Chain, question: str, phrases: list[str | None]) -> dict | None:
    """Which part does not link, or None when every part does."""
    if not contains(question, chain.names[-1]):
        return {"hop": len(chain.names), "part": "question", "needs": chain.names[-1]}
    for i, phrase in enumerate(phrases):
        if phrase is None or not _anchored(phrase, chain, i):
            return {"hop": i, "part": "phrase", "needs": _anchors(chain, i)[0]}
    return None


AUTHORS = {"hops": hops, "path": path}

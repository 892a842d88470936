"""A document's snippet in a simulated tool result (generators/tools/simulator.py): its
sentences up to a number of characters, those that hold a text the call must keep first,
then by the words they share with the query; without the sentences that hold a text the
call drops or that name an answer.

Sentences are split once per document; they are normalised (lower case, single spaces) only
when a snippet looks for a text in them, and tokenised only when a snippet must choose among
them (the document is longer than the limit), which a short document never needs. What is
read is kept for the `kept` documents read last (oldest out first), so memory does not grow
with the corpus: all of them would be ~6 KB a document, mostly the token sets.

    snippets = Snippets(texts, tokenize)          # texts by document index
    snippets.snippet(i, query_tokens, 320, must_n=["she was born in london."])
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Callable, Sequence

from generators.tools.sim_call import AnyOf

_SENT_RE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """Sentences of a passage (simple punctuation rule; keeps the original wording)."""
    return [t for s in _SENT_RE.split(text.strip()) if (t := s.strip())]


def norm(s: str) -> str:
    """Lower case, single spaces."""
    return " ".join(s.lower().split())


KEPT = 8192  # documents whose sentences, normalised sentences and token sets are kept


def _kept(cache: OrderedDict, i: int, read: Callable[[int], list], size: int) -> list:
    """`read(i)`, kept in `cache` with at most `size` documents (the oldest leaves first: an
    OrderedDict drops it in constant time, where a dict's first key is found by a scan past
    the slots of those dropped before)."""
    got = cache.get(i)
    if got is None:
        if len(cache) >= size:
            cache.popitem(last=False)
        got = cache[i] = read(i)
    return got


class Snippets:
    """The snippets of a corpus's documents, with the sentences of the documents read last kept."""

    def __init__(self, texts: Sequence[str], tokenize: Callable[[str], list[str]], kept: int = KEPT):
        self.texts, self.tokenize, self.kept = texts, tokenize, kept
        self._sentences: OrderedDict[int, list[str]] = OrderedDict()
        self._normed: OrderedDict[int, list[str]] = OrderedDict()
        self._tokenized: OrderedDict[int, list[set[str]]] = OrderedDict()

    def sentences(self, i: int) -> list[str]:
        """A document's sentences."""
        return _kept(self._sentences, i, lambda i: split_sentences(self.texts[i]), self.kept)

    def norms(self, i: int) -> list[str]:
        """A document's sentences normalised, read only when a snippet looks for a text in them."""
        return _kept(self._normed, i, lambda i: [norm(s) for s in self.sentences(i)], self.kept)

    def tokens(self, i: int) -> list[set[str]]:
        """A document's sentences as sets of BM25 tokens, read only when a snippet must choose
        among them (the document is longer than its limit)."""
        return _kept(self._tokenized, i, lambda i: [set(self.tokenize(s)) for s in self.sentences(i)], self.kept)

    def snippet(self, i: int, qtoks: set[str], limit: int, must_n: Sequence[str] = (),
                drop_n: Sequence[str] = (), answers_re: AnyOf | None = None) -> str:
        """Document i's snippet: its sentences up to `limit` characters, those that hold a
        `must_n` text first, then by their words shared with the query; without the sentences
        that hold a `drop_n` text or name an answer. (`must_n`, `drop_n`: normalised texts.)"""
        sents = self.sentences(i)

        def hits(j: int, keys: list[str]) -> bool:
            n = self.norms(i)[j]
            return any(k in n or (len(n) > 15 and n in k) for k in keys)

        keep = [j for j, s in enumerate(sents)
                if not (drop_n and hits(j, drop_n)) and not (answers_re and answers_re.search(s))]
        if sum(len(sents[j]) + 1 for j in keep) <= limit:
            return " ".join(sents[j] for j in keep)
        first = [j for j in keep if must_n and hits(j, must_n)]
        toks = self.tokens(i)
        rest = sorted((j for j in keep if j not in first), key=lambda j: (-len(qtoks & toks[j]), j))
        chosen, used = [], 0
        for j in first + rest:
            if j in first or used + len(sents[j]) + 1 <= limit:
                chosen.append(j)
                used += len(sents[j]) + 1
        return " ".join(sents[j] for j in sorted(chosen))

"""The snippets' caches are bounded: a Snippets that keeps two documents gives every snippet a
keep-all one gives, and holds no more than two documents' sentences, norms or token sets.
Run: .venv/bin/python -m pytest tests/generators/test_snippets.py -q
"""

from __future__ import annotations

import random

from generators.tools.retrieval import TOKEN_PATTERN
from generators.tools.snippets import Snippets


def _tokenize(text: str) -> list[str]:
    return TOKEN_PATTERN.findall(text.lower())


WORDS = "the river city was founded by a poet who wrote songs of the harbour in 1887".split()


def _texts(rng: random.Random, n: int) -> list[str]:
    def sentence() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))).capitalize() + "."
    return [" ".join(sentence() for _ in range(rng.randint(1, 8))) for _ in range(n)]


def test_a_bounded_cache_gives_the_snippets_of_an_unbounded_one_and_keeps_at_most_its_bound():
    rng = random.Random(3)
    texts = _texts(rng, 40)
    everything, bounded = Snippets(texts, _tokenize, kept=len(texts)), Snippets(texts, _tokenize, kept=2)
    for _ in range(600):
        i = rng.randrange(len(texts))
        qtoks = set(rng.sample(WORDS, 3))
        limit = rng.choice([20, 60, 120, 400])
        must = [" ".join(rng.sample(WORDS, 2))] if rng.random() < 0.3 else []
        drop = [rng.choice(WORDS)] if rng.random() < 0.3 else []
        assert bounded.snippet(i, qtoks, limit, must_n=must, drop_n=drop) == \
            everything.snippet(i, qtoks, limit, must_n=must, drop_n=drop)
        assert max(len(bounded._sentences), len(bounded._normed), len(bounded._tokenized)) <= 2
    assert len(everything._sentences) == len(texts)  # the unbounded one read every document
    assert len(everything._tokenized) > 2  # and chose among sentences for several of them

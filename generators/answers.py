"""Answer normalization and matching: exact match and token F1 after normalization, against a
gold answer and its aliases. Used by synthesis (the final answer must match the triple), the
rule validators and the training rewards, so all three agree.

Normalization (SQuAD-style, extended): Unicode NFKC, lower case, number words up to
ninety-nine become digits ("twenty-one" -> "21"), thousands separators are dropped
("1,887" -> "1887"), punctuation and the articles a/an/the are removed, whitespace is
collapsed.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from dataclasses import dataclass

_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
          "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
NUMBER_WORDS = {w: i for i, w in enumerate(_UNITS)} | {w: 10 * i for i, w in enumerate(_TENS) if w}
_NUM_RE = re.compile(r"\b(" + "|".join(_TENS[2:]) + r")[\s-](" + "|".join(_UNITS[1:10]) + r")\b")
_WORD_RE = re.compile(r"\b(" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + r")\b")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans({c: " " for c in string.punctuation + "‘’“”–—"})


def number_to_words(n: int) -> str:
    """0..99 in words ("21" -> "twenty-one"); other numbers as digits."""
    if 0 <= n < 20:
        return _UNITS[n]
    if 20 <= n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else "-" + _UNITS[n % 10])
    return str(n)


def normalize(text: str) -> str:
    s = unicodedata.normalize("NFKC", text or "").lower()
    s = _NUM_RE.sub(lambda m: str(NUMBER_WORDS[m.group(1)] + NUMBER_WORDS[m.group(2)]), s)
    s = _WORD_RE.sub(lambda m: str(NUMBER_WORDS[m.group(1)]), s)
    s = _THOUSANDS.sub("", s)
    s = s.translate(_PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def f1(prediction: str, gold: str) -> float:
    p, g = normalize(prediction).split(), normalize(gold).split()
    if not p or not g:
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


@dataclass(frozen=True)
class Match:
    em: bool
    f1: float
    matched: str | None  # the gold string or alias that matched best


def match(prediction: str, gold: str, aliases: list[str] | tuple[str, ...] = ()) -> Match:
    """Exact match (normalized) against gold or any alias, and the best token F1."""
    golds = [gold, *[a for a in aliases if a]]
    norm_p = normalize(prediction)
    for g in golds:
        if norm_p == normalize(g):
            return Match(True, 1.0, g)
    best = max(golds, key=lambda g: f1(prediction, g))
    return Match(False, f1(prediction, best), best)

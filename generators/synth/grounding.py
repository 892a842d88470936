"""Grounding: does a piece of reasoning state only what its sources say?

A text's mentions are its numbers and its capitalised names:

  numbers  digit groups ("1861", "1,654,300", "3.5"; "1920s" is 1920) and number words up to
           "ninety-nine" ("sixteen" is 16); whole numbers below 10 are not checked, they are
           too common in the language of reasoning itself ("step 1", "two pages", "top 3")
  names    runs of capitalised words ("Treaty of Stozoth"), as generators/synth/names.py
           reads them

A name is grounded when it occurs in a source as whole words (case and punctuation
ignored); a number when a source holds the same value, in digits or in words. A number of
the text that is the sum or the difference of two grounded numbers of the same text is
grounded too, so a derivation may state what it computes ("1861 - 988 = 873").
Sources are plain text or JSON (tool results: their string and number leaves are read);
generators/synth/sources.py keeps them and looks a text's mentions up in them:

    numbers_in("The story is set in the 1920s.")        # ["1920"]
    mentions("In 1861 the Treaty of Stozoth ...")   # (["1861"], [("In", "", True), ("Treaty", " of Stozoth", False)])
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

import ahocorasick
import orjson

from generators.corpus.names import WORD_NUMBERS
from generators.synth.names import read_ascii, stretches

# digits with no word character, "." or "," before (asked after the first digit, so that a
# search jumps to digits), grouped by commas or with decimals, and no digit after
NUMBER_RE = re.compile(r"(\d(?<![\w.,]\d)(?:\d{0,2}(?:,\d{3})+|\d*(?:\.\d+)?))(?!\d)")
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_UNITS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _word_number_re() -> re.Pattern:
    """A number word as a whole part of a hyphenated run: the words, and a tens word and a unit
    word joined by a hyphen, as a tree of their letters, the longest first, each branch asking
    for no word character before its first letter (so that a search jumps to those letters)."""
    tree: dict = {}
    for w in [f"{t}-{u}" for t in _TENS for u in _UNITS] + [w for w in WORD_NUMBERS if "-" not in w]:
        node = tree
        for c in w:
            node = node.setdefault(c, {})
        node[""] = {}

    def branch(node: dict) -> str:
        alts = [re.escape(c) + branch(node[c]) for c in sorted(node) if c]
        body = "" if not alts else alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if "" in node and body else body
    return re.compile("(?:" + "|".join(re.escape(c) + r"(?<!\w.)" + branch(tree[c]) for c in sorted(tree)) + r")(?!\w)")


WORD_NUMBER_RE = _word_number_re()
_POSSESSIVE = re.compile(r"'s\b")
_WORD = re.compile(r"\w+")
SMALL = 10  # whole numbers below this are not checked (module docstring)
def plain_text(content: str) -> str:
    """The text of a message: for JSON (a tool result), its string and number leaves, as
    `json.loads` reads them. orjson reads faster and alike, but for what it refuses (NaN,
    numbers out of a float's range, lone surrogates) and for integers beyond 64 bits, which
    it reads as floats: a text it refuses, or whose reading holds a float, is read by json."""
    s = (content or "").strip()
    if s[:1] in "{[":
        try:
            leaves = _leaves(orjson.loads(s))
        except orjson.JSONDecodeError:
            leaves = None
        if leaves is None:
            try:
                leaves = _leaves(json.loads(s), floats=True)
            except ValueError:
                return content
        return "\n".join(leaves)
    return content


def _leaves(value, floats: bool = False) -> list[str] | None:
    """The string and number leaves of a JSON value, in order; None for one with a float
    leaf unless `floats`."""
    out: list[str] = []

    def walk(v) -> None:  # (JSON makes plain types only: a bool is no int here)
        t = type(v)
        if t is str:
            out.append(v)
        elif t is dict:
            for x in v.values():
                walk(x)
        elif t is list:
            for x in v:
                walk(x)
        elif t is int:
            out.append(str(v))
        elif t is float:
            if not floats:
                raise _Float
            out.append(str(v))
    try:
        walk(value)
    except _Float:
        return None
    return out


class _Float(Exception):
    """A float leaf where `_leaves` was asked for none."""


def normalized(text: str) -> str:
    """Lower case, "'s" and apostrophes dropped, the words joined by single spaces."""
    t = text.lower()
    if "'" in t or "’" in t:
        t = _POSSESSIVE.sub("", t.replace("’", "'")).replace("'", "")
    return " ".join(_WORD.findall(t))


def number_value(raw: str) -> str:
    """A number as written ("1,654,300", "3.50") as one form of its value ("1654300", "3.5")."""
    raw = raw.replace(",", "")
    return str(float(raw)) if "." in raw else str(int(raw))


def numbers_in(text: str) -> list[str]:
    """Number values of `text` in order (digits, then number words). A number word is a whole
    part of a run of words joined by hyphens, read left to right with a tens word and a unit
    word taken as one ("twenty-one" is 21, "one-time" holds 1, "twenty--one" is 20 and 1)."""
    return [number_value(m) for m in NUMBER_RE.findall(text)] + _word_numbers(text)


def _word_numbers(text: str) -> list[str]:
    """The values of the number words of `text`, as `numbers_in` reads them. Most texts have
    none: WORD_NUMBER_RE reads a text only when `_number_word_parts` finds one of the number
    words that hold no other in it (every number word holds one of those)."""
    low = text.lower()
    if next(_number_word_parts().iter(low), None) is None:
        return []
    return [str(WORD_NUMBERS[w]) for w in WORD_NUMBER_RE.findall(low)]


@lru_cache(maxsize=1)
def _number_word_parts() -> ahocorasick.Automaton:
    """An automaton that finds the number words holding no other number word ("four", not
    "fourteen") anywhere in a text. It reads a reasoning step in under a microsecond, where
    WORD_NUMBER_RE's search takes two or more: the words' first letters are common ones, and
    the search stops at each of them."""
    words = [w for w in WORD_NUMBERS if "-" not in w]
    parts = ahocorasick.Automaton()
    for w in words:
        if not any(v != w and v in w for v in words):
            parts.add_word(w, w)
    parts.make_automaton()
    return parts


def is_small(n: str) -> bool:
    """Whether a number value (`number_value`) is a whole number below SMALL."""
    return "." not in n and int(n) < SMALL


def mentions(text: str) -> tuple[list[str], list[tuple[str, str, bool]]]:
    """`numbers_in(text)` and `stretches(text)` (generators/synth/names.py), read together: an
    ASCII text's digits, capitals and sentence ends in one scan (`read_ascii`)."""
    if not text.isascii():
        return numbers_in(text), stretches(text)
    digits, out = read_ascii(text)
    return [number_value(d) for d in digits] + _word_numbers(text), out

"""Sources: what a text may draw on, and the lookups the grounding check makes in them.

The sources are kept as plain texts (generators/synth/grounding.py `plain_text`); a mention
of a text is looked up there as it is written where the answer is then certain, and the
sources are read whole (numbers, lower-case words, normalised text) only when it is not.
`ungrounded` gives the mentions of a text no source holds (grounding.py says what a mention
is and when it is held). Which capitalised words are names depends on the words the sources
use in lower case; when every stretch of capitalised words of the text is written in the
sources, or every name read without such words is held, no name can be missing, and those
words are not looked up.

    src = Sources([question, *tool_results])
    src.ungrounded("The story is set in the 1920s.")   # [("number", "1920")]
"""

from __future__ import annotations

import re
from typing import Iterable

from generators.corpus.names import WORD_NUMBERS
from generators.synth.grounding import (NUMBER_RE, WORD_NUMBER_RE, is_small, mentions, normalized, number_value,
                                        numbers_in, plain_text)
from generators.synth.names import COMMON, TOKEN_CHAR, TOKEN_RE, Either, Lookup, lower_words, names_in, stretch_names


class Sources:
    """What a text may draw on: numbers, names and lower-case words of source texts.

    The sources are kept as plain texts (`plain_text`), joined by line breaks into one text
    (`hay`; no mention spans a line break). A mention is looked up in that text as it is
    written where the answer is then certain (`has_name`, `has_number`, `has_lower`); only
    when it is not is a whole reading made (`numbers`, `lower`, `text`), once per sources."""

    def __init__(self, texts: Iterable[str] = ()):
        self._plain: list[str] = []
        self._asked: dict[tuple, tuple[bool, int]] = {}  # has_lower's answers, and how much of hay they read
        self._written_names: set[str] = set()  # (sources only grow: what was found stays found)
        self._written_numbers: set[str] = set()
        self._clear()
        for t in texts:
            self.add(t)

    def _clear(self) -> None:
        self._hay: str | None = None
        self._low: str | None = None
        self._aligned: bool | None = None
        self._numbers: set[str] | None = None
        self._lower: set[str] | None = None
        self._text: str | None = None

    def add(self, content: str, plain: str | None = None) -> "Sources":
        """Adds a source; `plain` is its plain text where the caller knows it (else read)."""
        self._plain.append(plain_text(content or "") if plain is None else plain)
        self._clear()
        return self

    def subset(self, positions: Iterable[int]) -> "Sources":
        """The sources at `positions` (in the order added), without reading them again."""
        out = Sources()
        out._plain = [self._plain[k] for k in positions]
        return out

    @property
    def hay(self) -> str:
        if self._hay is None:
            self._hay = "\n".join(self._plain)
        return self._hay

    @property
    def numbers(self) -> set[str]:
        """The number values of the sources (`numbers_in`)."""
        if self._numbers is None:
            self._numbers = set(numbers_in(self.hay))
        return self._numbers

    @property
    def lower(self) -> set[str]:
        """The lower-case words of the sources (what `names_in` reads as common words)."""
        if self._lower is None:
            self._lower = lower_words(self.hay)
        return self._lower

    @property
    def text(self) -> str:
        """The sources normalised (`normalized`), " | " between two sources."""
        if self._text is None:
            self._text = " " + " | ".join(map(normalized, self._plain)) + " "
        return self._text

    def has_name(self, name: str) -> bool:
        """Whether the sources hold `name` as whole words, case and punctuation ignored. It
        does when `name` occurs as it is written between characters that are neither word
        characters nor apostrophes (or before "'s", which `normalized` drops): its normalised words
        then occur in the normalised sources. A capital sigma in `name` goes to `text` (its
        lower case depends on the letters around it), as does a name not written so."""
        key = normalized(name)
        return bool(key) and (self._written(name) or f" {key} " in self.text)

    def _written(self, name: str) -> bool:
        """Whether `name` occurs as it is written in a source, as `has_name` asks first (a
        stretch of `_names_held` may hold a line break, which no name does). Looked for from
        the end (a think mostly names what was just read), and remembered once found."""
        if name in self._written_names:
            return True
        if "\u03a3" in name or "\n" in name:
            return False
        hay = self.hay
        a = hay.rfind(name)
        while a >= 0:
            if not (a and _NAME_EDGE.match(hay, a - 1)) and _NAME_END.match(hay, a + len(name)):
                self._written_names.add(name)
                return True
            a = hay.rfind(name, 0, a + len(name) - 1)
        return False

    def has_number(self, n: str) -> bool:
        """Whether the sources hold the number value `n` (as `numbers_in` writes it). They do
        when its digits occur where NUMBER_RE reads exactly them: no word character, "." or ","
        before; no digit, and no "." or "," before a digit, after. Else `numbers` decides."""
        if n in self._written_numbers:
            return True
        if _DIGITS.fullmatch(n):
            hay, a = self.hay, self.hay.rfind(n)
            while a >= 0:
                if not (a and _NUMBER_BEFORE.match(hay, a - 1)) and not _NUMBER_AFTER.match(hay, a + len(n)):
                    self._written_numbers.add(n)
                    return True
                a = hay.rfind(n, 0, a + len(n) - 1)
            if "." not in n and self._numbers is None:
                return self._holds_whole(int(n))
        return n in self.numbers

    def _holds_whole(self, v: int) -> bool:
        """Whether `numbers` holds the whole number `v`, read where it may be: a digit match
        of value v holds its digits, plain or grouped by commas; a word match holds a number
        word of value v. Each place is read as NUMBER_RE (or the number-word pattern over the
        lower-cased text) would, from the last character before it no match holds."""
        n = str(v)
        for text, pattern, forms, inside, value in (
                (self.hay, NUMBER_RE, dict.fromkeys([n, f"{v:,}"]), _IN_NUMBER, number_value),
                (self.low, WORD_NUMBER_RE, _WORDS_OF.get(v, ()), _IN_WORD_NUMBER, lambda w: str(WORD_NUMBERS[w]))):
            for form in forms:
                a = text.find(form)
                while a >= 0:
                    r = a
                    while r and inside.match(text, r - 1):
                        r -= 1
                    for m in pattern.finditer(text, r):
                        if m.start() > a + len(form):
                            break
                        if value(m.group()) == n:
                            return True
                    a = text.find(form, a + 1)
        return False

    @property
    def low(self) -> str:
        """`hay` lower-cased."""
        if self._low is None:
            self._low = self.hay.lower()
        return self._low

    @property
    def aligned(self) -> bool:
        """Whether each place of `low` is the same place of `hay` (see `has_lower`)."""
        if self._aligned is None:
            self._aligned = "\u03a3" not in self.hay and "\u0130" not in self.hay
        return self._aligned

    def has_lower(self, *words: str) -> bool:
        """Whether one of `words` is in `lower`: whether a token of TOKEN_RE that starts with a
        lower-case letter lower-cases to it (trailing apostrophes dropped). Each place where
        the lower-cased sources hold the word and the sources a lower-case letter is read as
        TOKEN_RE would, from the last character before it that no token holds (words that
        start with the shortest of them are looked for together). Places line up as every
        lower case is one character in place, but those of a capital sigma and a dotted
        capital I: sources with either are read whole (`lower`)."""
        if self._lower is None and all(words) and self.aligned:
            held, upto = self._asked.get(words, (False, 0))  # (sources only grow: what held still holds)
            if not held and upto < len(self.hay):
                stem = min(words, key=len)
                groups = [(stem, set(words))] if all(w.startswith(stem) for w in words) else [(w, {w}) for w in words]
                held = any(self._find_lower(first, forms, upto) for first, forms in groups)
                self._asked[words] = (held, len(self.hay))
            return held
        return any(w in self.lower for w in words)

    def _find_lower(self, first: str, forms: set[str], start: int) -> bool:
        """Whether a token of `lower` in `forms` starts where `first` does, from `start` on."""
        hay, low = self.hay, self.low
        a = low.find(first, start)
        while a >= 0:
            if hay[a].islower():
                r = a
                while r and TOKEN_CHAR.match(hay, r - 1):
                    r -= 1
                for m in TOKEN_RE.finditer(hay, r):
                    if m.start() >= a:
                        if m.start() == a and m.group().lower().rstrip("'’") in forms:
                            return True
                        break
            a = low.find(first, a + 1)
        return False

    def _names_held(self, sites: list[tuple[str, str, bool]]) -> bool:
        """Whether the sources hold every name of a text, given its stretches of capitalised
        words (grounding.py `mentions`), whatever words they use in lower case: each stretch
        is written in them whole, or each of its names read without common words is held.
        The names read with common words are parts of these (a stretch with a capitalised
        connector, which may be a name alone, is left to the whole reading)."""
        for first, rest, starts in sites:
            if ((not rest or rest[-1] == "I" and rest[:-1].isspace())  # (a word, or a word and "I": "So I")
                    and (first in ("The", "I") or starts and first.lower() in COMMON)):
                continue  # (words that are no names: `stretch_names` reads none in them)
            if self._written(first + rest):
                continue
            if _CAPITAL_CONNECTOR.search(rest) or not all(self.has_name(n) for n in stretch_names(first, rest, starts)):
                return False
        return True

    def ungrounded(self, text: str) -> list[tuple[str, str]]:
        """("number" | "name", mention) for every mention of `text` no source holds."""
        bad: list[tuple[str, str]] = []
        nums, sites = mentions(text)
        held = {n: self.has_number(n) for n in dict.fromkeys(nums) if not _known_small(n)} if nums else {}
        if not all(held.values()):
            held.update((n, self.has_number(n)) for n in nums if n not in held)
            grounded = [n for n in nums if held[n]]
            for n in dict.fromkeys(nums):
                if not held[n] and not is_small(n) and not _derived(n, grounded):
                    bad.append(("number", n))
                elif n not in grounded:
                    grounded.append(n)
        if self._names_held(sites):
            return bad
        common = Either(LowerOf(self), lower_words(text))
        bad += [("name", n) for n in dict.fromkeys(names_in(text, common)) if not self.has_name(n)]
        return bad


_CAPITAL_CONNECTOR = re.compile(r"(?<![^\W\d_])(?:O[fF]|D[eE]|V[aA][nN]|V[oO][nN]|L[aA])(?![^\W_])")
_NAME_EDGE = re.compile(r"[\w'’]")
_NAME_END = re.compile(r"(?:['’]s?)?(?![\w'’])")
_DIGITS = re.compile(r"(?:0|[1-9][0-9]*)(?:\.0|\.[0-9]*[1-9])?")  # (a number as `number_value` writes it)
_NUMBER_BEFORE = re.compile(r"[\w.,]")
_NUMBER_AFTER = re.compile(r"\d|[.,]\d")
_IN_NUMBER = re.compile(r"[\d.,]")  # (what a match of NUMBER_RE may hold)
_IN_WORD_NUMBER = re.compile(r"[\w-]")  # (what a match of WORD_NUMBER_RE may hold)
_WORDS_OF: dict[int, list[str]] = {}  # the number words of each value
for _word, _value in WORD_NUMBERS.items():
    _WORDS_OF.setdefault(_value, []).append(_word)


def _known_small(n: str) -> bool:
    try:
        return is_small(n)
    except ValueError:  # ("1e-05": `ungrounded` then reads it as it always did)
        return False


def _derived(n: str, grounded: list[str]) -> bool:
    """Whether `n` is a sum or a difference of two grounded numbers."""
    try:
        v = float(n)
        vals = [float(g) for g in grounded]
    except ValueError:
        return False
    return any(abs(a - b) == v or a + b == v for i, a in enumerate(vals) for b in vals[i + 1:])


def missing(text: str, terms: Iterable[str]) -> list[str]:
    """The `terms` (numbers or names) that `text` does not mention."""
    src = Sources([text])
    out = []
    for t in terms:
        nums = numbers_in(t)
        if nums and NUMBER_RE.fullmatch(t.strip()):
            if not all(src.has_number(n) for n in nums):
                out.append(t)
        elif not src.has_name(t):
            out.append(t)
    return out


class LowerOf(Lookup):
    """`Sources.lower` as a membership test (`Sources.has_lower`)."""

    def __init__(self, src: Sources):
        self.src = src

    def __contains__(self, word: str) -> bool:
        return self.src.has_lower(word)

    def any_of(self, words: tuple[str, ...]) -> bool:
        return self.src.has_lower(*words)

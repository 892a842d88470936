"""Fictional names built from syllables, deterministic by seed, plus small text helpers
(number words, articles) shared by the renderer, the question writer and the fact parser.

Every entity name is a run of capitalised words, optionally joined by "of" (for example
"Vantria", "Zed Korvan", "University of Drelm", "Song of Osk"), with no digits or
periods: `NAME_RE` matches exactly that shape, which is what lets `derive.py` parse
names back out of rendered sentences.

    from random import Random
    names = NameMaker(Random("7:names"))
    names.person("f")          # -> ("Ilsa", "Vornat")
"""

from __future__ import annotations

import re
from random import Random

ONSETS = ["b", "br", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "r",
          "s", "sk", "t", "th", "tr", "v", "z", "ch", "sh", "st", "j", "w", "y", ""]
VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o", "ai", "ei", "ou"]
CODAS = ["", "", "", "", "", "n", "r", "l", "s", "th", "m", "k", "nd", "rt", "v"]
GIVEN_END = {"m": ["an", "or", "ek", "as", "im", "el", "o"], "f": ["a", "ia", "ine", "el", "is", "ea", "ra"]}
PLACE_END = ["ath", "or", "ene", "ia", "und", "os", "ara", "esk", "holm", "wick", "mar", "ova"]
COUNTRY_END = ["ia", "and", "istan", "onia", "ary", "ora", "esia", "avia"]

NAME_TOKEN = r"[A-Z][a-z']*(?:-[A-Z][a-z']*)?"
NAME_PATTERN = rf"{NAME_TOKEN}(?: (?:of )?{NAME_TOKEN})*"
NAME_RE = re.compile(rf"^{NAME_PATTERN}$")
ARTICLE = "(?:[Tt]he )?"  # optional article before a name in running text
ARTICLE_RE = re.compile(r"^[Tt]he (?=[A-Z])")

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
         "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def number_word(n: int) -> str | None:
    """English words for 0..99 ("twenty-one"); None outside that range."""
    if not 0 <= n < 100:
        return None
    if n < 20:
        return _ONES[n]
    tens, ones = divmod(n, 10)
    return _TENS[tens] + ("-" + _ONES[ones] if ones else "")


WORD_NUMBERS = {number_word(i): i for i in range(100)}


def parse_count(text: str) -> int:
    """Inverse of number_word, also accepting digits."""
    return int(text) if text.isdigit() else WORD_NUMBERS[text]


def article(word: str) -> str:
    w = word.lower()
    return "an" if w[:1] in "aeiou" and not w.startswith(("uni", "eu", "use")) else "a"


def with_article(word: str) -> str:
    return f"{article(word)} {word}"


def takes_article(etype: str, name: str) -> bool:
    """Whether running text says "the X" (the Osk Festival, the University of Drelm)."""
    if etype == "event":
        return True
    if etype == "concept":
        return "'s " not in name
    if etype == "org":
        return name.startswith("University of") or name.endswith(" Institute")
    return False


def strip_article(name: str) -> str:
    """"the Osk Festival" -> "Osk Festival" (no entity name itself starts with "The ")."""
    return ARTICLE_RE.sub("", name, count=1)


def capitalise(text: str) -> str:
    return text[:1].upper() + text[1:]


class NameMaker:
    """Makes fresh names; every full name it returns is unique within this maker."""

    def __init__(self, rng: Random):
        self.rng = rng
        self.used: set[str] = set()
        self.surnames: set[str] = set()

    def _syllable(self) -> str:
        r = self.rng
        return r.choice(ONSETS) + r.choice(VOWELS) + r.choice(CODAS)

    def word(self, syllables: tuple[int, int] = (2, 3), ending: list[str] | None = None) -> str:
        """A pronounceable capitalised word of 2-3 syllables (4-12 letters)."""
        r = self.rng
        while True:
            n = r.randint(*syllables)
            w = "".join(self._syllable() for _ in range(n - (1 if ending else 0)))
            if ending:
                w += r.choice(ending)
            if 4 <= len(w) <= 10 and not re.search(r"(.)\1\1|[^aeiouy]{3}|[aeiouy]{3}", w):
                return w.capitalize()

    def _fresh(self, make) -> str:
        for _ in range(1000):
            name = make()
            if name not in self.used and not name.startswith("The "):
                self.used.add(name)
                return name
        raise RuntimeError("name space exhausted; use fewer entities")

    def person(self, gender: str) -> tuple[str, str]:
        """(given name, surname); the full name and the surname are both unique."""
        def make() -> str:
            given = self.word((1, 2), GIVEN_END[gender])
            for _ in range(1000):
                surname = self.word((2, 3))
                if surname not in self.surnames:
                    break
            return f"{given} {surname}"
        full = self._fresh(make)
        given, surname = full.split(" ", 1)
        self.surnames.add(surname)
        return given, surname

    def place(self) -> str:
        return self._fresh(lambda: self.word((1, 2), PLACE_END))

    def country(self) -> str:
        return self._fresh(lambda: self.word((1, 2), COUNTRY_END))

    def titled(self, patterns: list[str], nouns: list[str] | None = None) -> str:
        """A name from a pattern such as "{W} Press" or "{N} of {W}" ({W} a made-up word,
        {N} one of `nouns`)."""
        r = self.rng
        return self._fresh(lambda: r.choice(patterns).format(W=self.word((2, 3)), N=r.choice(nouns or [""])))

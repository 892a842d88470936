"""Grounding: does a piece of reasoning state only what its sources say?

A text's mentions are its numbers and its capitalised names:

  numbers  digit groups ("1861", "1,654,300", "3.5"; "1920s" is 1920) and number words up to
           "ninety-nine" ("sixteen" is 16); whole numbers below 10 are not checked, they are
           too common in the language of reasoning itself ("step 1", "two pages", "top 3")
  names    runs of capitalised words, joined by "of", "the", "de", "van", "von" or "la"
           ("Treaty of Stozoth"), without a leading "The" or a possessive "'s". A capitalised
           word is not part of a name when the sources or the text also use it (or its plural
           or singular) in lower case ("Birth" when "birth" occurs), nor when it opens a
           sentence and is a common word ("So", "The", "Comparing", any opener ending in -ing
           or -ly); "I" never is.

A name is grounded when it occurs in a source as whole words (case and punctuation
ignored); a number when a source holds the same value, in digits or in words. A number of
the text that is the sum or the difference of two grounded numbers of the same text is
grounded too, so a derivation may state what it computes ("1861 - 988 = 873").
Sources are plain text or JSON (tool results: their string and number leaves are read).

    src = Sources([question, *tool_results])
    src.ungrounded("The story is set in the 1920s.")   # [("number", "1920")]
"""

from __future__ import annotations

import json
import re
import sys
from functools import lru_cache
from typing import Iterable

from generators.corpus.names import WORD_NUMBERS

NUMBER_RE = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?!\d)")
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_WORD_NUMBER_RE = re.compile(  # a number word as a whole part of a hyphenated run, pairs first
    r"(?<!\w)(?:(?:" + "|".join(_TENS) + r")-(?:one|two|three|four|five|six|seven|eight|nine)|"
    + "|".join(sorted((w for w in WORD_NUMBERS if "-" not in w), key=len, reverse=True)) + r")(?!\w)")
TOKEN_RE = re.compile(r"[^\W\d_][^\W_]*(?:['’\-][^\W\d_]+)*['’]?")
CONNECTORS = {"of", "the", "de", "van", "von", "la"}
SENTENCE_END = re.compile(r"[.!?:;\n]")
_POSSESSIVE = re.compile(r"'s\b")
_WORD = re.compile(r"\w+")
SMALL = 10  # whole numbers below this are not checked (module docstring)
COMMON = set("""
a an the this that these those there here it its he she his her him they their them we our us i my me you
your in on at of for from to by with as after before between among into about over under during without
which what who whom whose when where why how if yes no not nor and or but so then thus hence therefore
also now next first firstly second third finally lastly both each either neither all some any many most
more less only just still even again once since because while although though however instead otherwise
meanwhile additionally furthermore moreover consequently accordingly overall clearly indeed perhaps maybe
actually unfortunately fortunately note hmm wait oops ok okay well great good right sure let lets let's
answer question result results page pages step steps plan search find look use call try check compare
is are was were be been do does did has have had can could should would will must may might shall
one two three none neither i'm i'll i've i'd it's that's there's here's what's we're they're
given based according comparing subtracting adding counting since
conclude concluding need know see recall remember think say says said tell found get got go going
make take keep start continue stop proceed verify confirm assume suppose consider note notice
everything nothing something anything nobody everyone someone another other others such same
earlier later older younger larger smaller fewer higher lower bigger first last previous following
""".split())


def plain_text(content: str) -> str:
    """The text of a message: for JSON (a tool result), its string and number leaves."""
    s = (content or "").strip()
    if s[:1] in "{[":
        try:
            value = json.loads(s)
        except ValueError:
            return content
        out: list[str] = []

        def walk(v) -> None:  # (json.loads makes plain types only: a bool is no int here)
            t = type(v)
            if t is str:
                out.append(v)
            elif t is dict:
                for x in v.values():
                    walk(x)
            elif t is list:
                for x in v:
                    walk(x)
            elif t is int or t is float:
                out.append(str(v))
        walk(value)
        return "\n".join(out)
    return content


def _norm(text: str) -> str:
    """Lower case, "'s" and apostrophes dropped, the words joined by single spaces."""
    t = text.lower()
    if "'" in t or "’" in t:
        t = _POSSESSIVE.sub("", t.replace("’", "'")).replace("'", "")
    return " ".join(_WORD.findall(t))


def _num(raw: str) -> str:
    raw = raw.replace(",", "")
    return str(float(raw)) if "." in raw else str(int(raw))


def numbers_in(text: str) -> list[str]:
    """Number values of `text` in order (digits, then number words). A number word is a whole
    part of a run of words joined by hyphens, read left to right with a tens word and a unit
    word taken as one ("twenty-one" is 21, "one-time" holds 1, "twenty--one" is 20 and 1)."""
    return [_num(m) for m in NUMBER_RE.findall(text)] + [str(WORD_NUMBERS[w]) for w in _WORD_NUMBER_RE.findall(text.lower())]


def _small(n: str) -> bool:
    return "." not in n and int(n) < SMALL


def _lower_words(text: str) -> set[str]:
    return {w.lower().rstrip("'’") for w in set(TOKEN_RE.findall(text)) if w[0].islower()}


def names_in(text: str, common: set[str] = frozenset()) -> list[str]:
    """Capitalised names of `text` (module docstring); `common` adds words used in lower case.

    The words of `text` are TOKEN_RE's, in order. While no name is open, a stretch of
    lower-case words and other characters changes nothing but where the last word ended, so
    one precompiled pattern (`_skip`) jumps over it to the next capitalised word; word by word
    reading resumes there and lasts while a name is open."""
    out: list[str] = []
    run: list[str] = []
    pending: list[str] = []  # connectors seen after the run, kept only if a name word follows
    prev_end, pos, skip = 0, 0, _skip()

    def flush() -> None:
        if run:
            out.append(" ".join(run))
        run.clear()
        pending.clear()

    while True:
        if not run:
            jump = skip.match(text, pos)
            if jump.start(1) >= 0:  # the last lower-case word it passed
                prev_end = jump.end(1)
            pos = jump.end()
        m = TOKEN_RE.search(text, pos)
        if m is None:
            break
        word = m.group()
        pos = m.end()
        gap = text[prev_end:m.start()]
        if not word[0].isupper():  # no name word: it carries an open name over as a connector, or ends it
            prev_end = pos
            if run and not gap.strip() and word.lower() in CONNECTORS:
                pending.append(word)
            else:
                flush()
            continue
        starts = prev_end == 0 or bool(SENTENCE_END.search(gap))
        prev_end = pos
        if gap.strip():
            flush()  # punctuation or a number between two words ends a name
        possessive = word.endswith(("'s", "’s", "'", "’"))
        bare = word[:-2] if word.endswith(("'s", "’s")) else word[:-1] if word.endswith(("'", "’")) else word
        low = bare.lower()
        if run and low in CONNECTORS and not possessive:
            pending.append(bare)
            continue
        is_name = bare[:1].isupper() and low != "i" and not (  # `common` asked last: it may read sources
            starts and (low in COMMON or low.endswith(("ing", "ly")))) and not (
            _common(low, common))
        if is_name:
            if run and low == "the":
                flush()
            run.extend(pending)
            pending.clear()
            run.append(bare)
        else:
            flush()
        if possessive:
            flush()
    flush()
    return [n[4:] if n.startswith("The ") else n for n in out if n not in ("The",)]


def _common(low: str, common) -> bool:
    """Whether `common` holds the word, its plural or (for a word in -s) its singular."""
    forms = (low, low + "s", low[:-1]) if low.endswith("s") else (low, low + "s")
    if isinstance(common, Either):
        return common.any_of(forms)
    return any(f in common for f in forms)


@lru_cache(maxsize=1)
def _skip() -> re.Pattern:
    """A pattern over a stretch of TOKEN_RE words that do not start with a capital (its last
    one is group 1) and of characters no word starts with, up to the next capitalised word.
    Built on first use: the capitals are every letter of Unicode for which `isupper()` holds."""
    letter = re.compile(r"[^\W\d_]")
    caps = [c for c in map(chr, range(sys.maxunicode + 1)) if c.isupper() and letter.match(c)]
    ranges, start = [], 0
    for i in range(1, len(caps) + 1):
        if i == len(caps) or ord(caps[i]) != ord(caps[i - 1]) + 1:
            a, b = caps[start], caps[i - 1]
            ranges.append(re.escape(a) if a == b else f"{re.escape(a)}-{re.escape(b)}")
            start = i
    lower_word = r"(?![" + "".join(ranges) + r"])" + TOKEN_RE.pattern
    return re.compile(r"(?:(" + lower_word + r")|[\W\d_])*")


class Sources:
    """What a text may draw on: numbers, names and lower-case words of source texts.

    The sources are kept as plain texts (`plain_text`), joined by line breaks into one text
    (`hay`; no mention spans a line break). A mention is looked up in that text as it is
    written where the answer is then certain (`has_name`, `has_number`, `has_lower`); only
    when it is not is a whole reading made (`numbers`, `lower`, `text`), once per sources."""

    def __init__(self, texts: Iterable[str] = ()):
        self._plain: list[str] = []
        self._asked: dict[tuple, tuple[bool, int]] = {}  # has_lower's answers, and how much of hay they read
        self._clear()
        for t in texts:
            self.add(t)

    def _clear(self) -> None:
        self._hay: str | None = None
        self._low: str | None = None
        self._aligned = False  # (set with _low: whether `has_lower` may read `low` in place of `lower`)
        self._numbers: set[str] | None = None
        self._lower: set[str] | None = None
        self._text: str | None = None

    def add(self, content: str) -> "Sources":
        self._plain.append(plain_text(content or ""))
        self._clear()
        return self

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
            self._lower = _lower_words(self.hay)
        return self._lower

    @property
    def text(self) -> str:
        """The sources normalised (`_norm`), " | " between two sources."""
        if self._text is None:
            self._text = " " + " | ".join(map(_norm, self._plain)) + " "
        return self._text

    def has_name(self, name: str) -> bool:
        """Whether the sources hold `name` as whole words, case and punctuation ignored. It
        does when `name` occurs as it is written between characters that are neither word
        characters nor apostrophes (or before "'s", which `_norm` drops): its normalised words
        then occur in the normalised sources. A capital sigma in `name` goes to `text` (its
        lower case depends on the letters around it), as does a name not written so."""
        key = _norm(name)
        if not key:
            return False
        if "\u03a3" not in name:
            hay, a = self.hay, self.hay.find(name)
            while a >= 0:
                if not (a and _NAME_EDGE.match(hay, a - 1)) and _NAME_END.match(hay, a + len(name)):
                    return True
                a = hay.find(name, a + 1)
        return f" {key} " in self.text

    def has_number(self, n: str) -> bool:
        """Whether the sources hold the number value `n` (as `numbers_in` writes it). They do
        when its digits occur where NUMBER_RE reads exactly them: no word character, "." or ","
        before; no digit, and no "." or "," before a digit, after. Else `numbers` decides."""
        if _DIGITS.fullmatch(n):
            hay, a = self.hay, self.hay.find(n)
            while a >= 0:
                if not (a and _NUMBER_BEFORE.match(hay, a - 1)) and not _NUMBER_AFTER.match(hay, a + len(n)):
                    return True
                a = hay.find(n, a + 1)
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
                (self.hay, NUMBER_RE, dict.fromkeys([n, f"{v:,}"]), _IN_NUMBER, _num),
                (self.low, _WORD_NUMBER_RE, _WORDS_OF.get(v, ()), _IN_WORD_NUMBER, lambda w: str(WORD_NUMBERS[w]))):
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
            self._aligned = "\u03a3" not in self.hay and "\u0130" not in self.hay
        return self._low

    def has_lower(self, *words: str) -> bool:
        """Whether one of `words` is in `lower`: whether a token of TOKEN_RE that starts with a
        lower-case letter lower-cases to it (trailing apostrophes dropped). Each place where
        the lower-cased sources hold the word and the sources a lower-case letter is read as
        TOKEN_RE would, from the last character before it that no token holds (words that
        start with the shortest of them are looked for together). Places line up as every
        lower case is one character in place, but those of a capital sigma and a dotted
        capital I: sources with either are read whole (`lower`)."""
        if self._lower is None and all(words) and self.low is not None and self._aligned:
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
                while r and _TOKEN_CHAR.match(hay, r - 1):
                    r -= 1
                for m in TOKEN_RE.finditer(hay, r):
                    if m.start() >= a:
                        if m.start() == a and m.group().lower().rstrip("'’") in forms:
                            return True
                        break
            a = low.find(first, a + 1)
        return False

    def ungrounded(self, text: str) -> list[tuple[str, str]]:
        """("number" | "name", mention) for every mention of `text` no source holds."""
        bad: list[tuple[str, str]] = []
        nums = numbers_in(text)
        if any(not _known_small(n) and not self.has_number(n) for n in dict.fromkeys(nums)):
            held = {n: self.has_number(n) for n in nums}
            grounded = [n for n in nums if held[n]]
            for n in dict.fromkeys(nums):
                if not held[n] and not _small(n) and not _derived(n, grounded):
                    bad.append(("number", n))
                elif n not in grounded:
                    grounded.append(n)
        common = Either(LowerOf(self), _lower_words(text))
        bad += [("name", n) for n in dict.fromkeys(names_in(text, common)) if not self.has_name(n)]
        return bad


_NAME_EDGE = re.compile(r"[\w'’]")
_NAME_END = re.compile(r"(?:['’]s?)?(?![\w'’])")
_DIGITS = re.compile(r"(?:0|[1-9][0-9]*)(?:\.0|\.[0-9]*[1-9])?")  # (a number as `_num` writes it)
_NUMBER_BEFORE = re.compile(r"[\w.,]")
_NUMBER_AFTER = re.compile(r"\d|[.,]\d")
_TOKEN_CHAR = re.compile(r"[^\W_]|['’\-]")  # (what a token of TOKEN_RE may hold)
_IN_NUMBER = re.compile(r"[\d.,]")  # (what a match of NUMBER_RE may hold)
_IN_WORD_NUMBER = re.compile(r"[\w-]")  # (what a match of _WORD_NUMBER_RE may hold)
_WORDS_OF: dict[int, list[str]] = {}  # the number words of each value
for _word, _value in WORD_NUMBERS.items():
    _WORDS_OF.setdefault(_value, []).append(_word)


def _known_small(n: str) -> bool:
    try:
        return _small(n)
    except ValueError:  # ("1e-05": `ungrounded` then reads it as it always did)
        return False


class LowerOf:
    """`Sources.lower` as a membership test (`Sources.has_lower`)."""

    def __init__(self, src: Sources):
        self.src = src

    def __contains__(self, word: str) -> bool:
        return self.src.has_lower(word)

    def any_of(self, words: tuple[str, ...]) -> bool:
        return self.src.has_lower(*words)


class Either:
    """Membership in either of two collections (`b` asked first), without building their union."""

    def __init__(self, a, b):
        self.a, self.b = a, b

    def __contains__(self, x: str) -> bool:
        return x in self.b or x in self.a

    def any_of(self, words: tuple[str, ...]) -> bool:
        """Whether either holds one of `words`."""
        return any(w in self.b for w in words) or (
            self.a.any_of(words) if isinstance(self.a, LowerOf) else any(w in self.a for w in words))


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

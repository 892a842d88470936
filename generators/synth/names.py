"""Capitalised names of a text, as generators/synth/grounding.py checks them against sources:
runs of capitalised words, joined by "of", "the", "de", "van", "von" or "la" ("Treaty of
Stozoth"), without a leading "The" or a possessive "'s". A capitalised word is not part of a
name when the sources or the text also use it (or its plural or singular) in lower case
("Birth" when "birth" occurs), nor when it opens a sentence and is a common word ("So", "The",
"Comparing", any opener ending in -ing or -ly); "I" never is.

A text is read in stretches of capitalised words (`stretches`), and only there word by word
(`stretch_names`); an ASCII text's stretches, sentence ends and digits come from one scan
(`read_ascii`).

    names_in("So the Treaty of Stozoth was signed.")    # ["Treaty of Stozoth"]
"""

from __future__ import annotations

import re
import sys
from functools import lru_cache
from typing import Iterator

_WORD_TAIL = r"[^\W_]*(?:['’\-][^\W\d_]+)*['’]?"  # (what follows a word's first letter)
TOKEN_RE = re.compile(r"[^\W\d_]" + _WORD_TAIL)
CONNECTORS = {"of", "the", "de", "van", "von", "la"}
# a connector as a whole word (nothing TOKEN_RE would add), in any case after its first letter
_CONNECTOR = ("(?:" + "|".join(w[0] + "".join(f"[{c}{c.upper()}]" for c in w[1:]) for w in sorted(CONNECTORS))
              + r")(?![^\W_]|['’]|-[^\W\d_])")
SENTENCE_END = re.compile(r"[.!?:;\n]")
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



def lower_words(text: str) -> set[str]:
    """The words of `text` written in lower case, lowered, a trailing apostrophe dropped."""
    return {w.lower().rstrip("'’") for w in set(TOKEN_RE.findall(text)) if w[0].islower()}


def names_in(text: str, common: set[str] = frozenset()) -> list[str]:
    """Capitalised names of `text` (module docstring); `common` adds words used in lower case.

    The words of `text` are TOKEN_RE's, in order. Names are read in its stretches of
    capitalised words (`stretches`), and only there word by word."""
    out: list[str] = []
    for first, rest, starts in stretches(text):
        out += stretch_names(first, rest, starts, common)
    return out


def stretches(text: str) -> list[tuple[str, str, bool]]:
    """The stretches of `text` that could make names: capitalised words joined by white space
    and lower-case connectors. Each is given as its first word, the rest, and whether it opens
    a sentence. Whatever ends a stretch (a lower-case word, punctuation, a number) ends any
    name open in it: the names of a stretch are parts of it, and `common` can only end names
    sooner, so the names read with a larger `common` are parts of those read with a smaller
    one (but for a capitalised connector, "Of" or "La", that a smaller `common` reads as
    joining two words and a larger one as a name of its own).

    An ASCII text is searched for its capitals and its sentence ends in one scan
    (`_ascii_scan`): a capital after a letter is inside a word, one after anything but a
    letter, a digit, an apostrophe or a hyphen starts one, and it opens a sentence when a
    sentence end comes after the last letter before it. A capital after a digit, an apostrophe
    or a hyphen may be either: such a text is read stretch by stretch (`_ascii_sites`), the
    words around that capital as TOKEN_RE reads them (`_starts_word`). Any other text is read
    word by word (`_runs`)."""
    return read_ascii(text)[1] if text.isascii() else list(_word_stretches(text))


def read_ascii(text: str) -> tuple[list[str], list[tuple[str, str, bool]]]:
    """The numbers in digits (as written: generators/synth/grounding.py NUMBER_RE's matches) and
    the stretches of an ASCII text, from one scan (`_ascii_scan`): a number's point may end a
    sentence, so the scan reads the digits as well."""
    numbers: list[str] = []
    out: list[tuple[str, str, bool]] = []
    opener = unsure = False
    for capital, tail, rest, end, digit, digits, capital_next in _ascii_scan()("\n" + text):  # (a text's start opens)
        if digit:
            numbers.append(digit + digits)
            opener = opener or bool(capital_next) and "." in digits  # (its point is a sentence end)
        elif end:
            opener = True
        elif capital:
            out.append((capital + tail, rest, opener))
            opener = False
        else:  # (a capital after a digit, an apostrophe or a hyphen)
            unsure = True
    if unsure:
        out = [(first, rest, _opens(text, at)) for first, rest, at in _ascii_sites(text)]
    return numbers, out


def _ascii_sites(text: str) -> list[tuple[str, str, int]]:
    """The stretches of an ASCII text (`stretches`), each with where it starts instead of
    whether it opens a sentence (`_opens` says that), found one by one: `read_ascii` reads a
    text so where a capital follows a digit, an apostrophe or a hyphen."""
    out, search, pos = [], _ascii_stretches().search, 0
    while m := search(text, pos):
        if m.group(1) is not None:
            out.append((m.group(1), m.group(2), m.start()))
            pos = m.end()
            continue
        at = m.end() - 1  # (a capital after a digit, an apostrophe or a hyphen)
        s = _starts_word(text, at) and _ASCII_STRETCH.match(text, at)
        if s:
            out.append((s.group(1), s.group(2), at))
        pos = s.end() if s else at + 1
    return out


def _starts_word(text: str, at: int) -> bool:
    """Whether a word of TOKEN_RE starts at `at`: the words are read from the last character
    before it that no word holds (a reading from the start reaches that place alike)."""
    r = at
    while r and TOKEN_CHAR.match(text, r - 1):
        r -= 1
    for w in TOKEN_RE.finditer(text, r):
        if w.end() > at:
            return w.start() == at
    return False


def _opens(text: str, at: int) -> bool:
    """Whether the stretch of the ASCII `text` at `at` opens a sentence: no letter is before
    it, or a sentence end is after the last letter before it (a letter is always in a word,
    and no word holds a sentence end)."""
    j = at - 1
    while j >= 0 and not text[j].isalpha():
        j -= 1
    return j < 0 or bool(SENTENCE_END.search(text, j + 1, at))


def _word_stretches(text: str) -> Iterator[tuple[str, str, bool]]:
    """`stretches` of any text, by `_runs`: it jumps over lower-case words and other
    characters, matching each word whole."""
    pos, runs = 0, _runs()
    while True:
        m = runs.match(text, pos)
        if m.group(2) is None:
            return
        prev_end = m.end(1) if m.start(1) >= 0 else pos  # (where the word before it ended)
        yield m.group(2), m.group(3), prev_end == 0 or bool(SENTENCE_END.search(text, prev_end, m.start(2)))
        pos = m.end()


def stretch_names(first: str, rest: str, starts: bool, common: set[str] = frozenset()) -> list[str]:
    """The names of one stretch (`stretches`), without a leading "The"."""
    if not rest and not first.endswith(("'", "’", "'s", "’s")):  # (one word, no possessive)
        return [] if first in ("The", "I") or _opener(first.lower(), starts, common) else [first]
    out: list[str] = []
    _read_stretch(first + rest, starts, common, out)
    return [n[4:] if n.startswith("The ") else n for n in out if n != "The"]


def _read_stretch(stretch: str, starts: bool, common, out: list[str]) -> None:
    """Appends the names of one stretch of `_runs` to `out`, word by word."""
    run: list[str] = []
    pending: list[str] = []  # connectors seen after the run, kept only if a name word follows

    def flush() -> None:
        if run:
            out.append(" ".join(run))
        run.clear()
        pending.clear()

    parts = _SPACE.split(stretch)  # words, with the white space between them
    for k in range(0, len(parts), 2):
        word = parts[k]
        if k:
            starts = "\n" in parts[k - 1]
        if not word[0].isupper():  # a lower-case connector
            if run:
                pending.append(word)
            continue
        possessive = word.endswith(("'s", "’s", "'", "’"))
        bare = word[:-2] if word.endswith(("'s", "’s")) else word[:-1] if word.endswith(("'", "’")) else word
        low = bare.lower()
        if run and low in CONNECTORS and not possessive:
            pending.append(bare)
            continue
        if low != "i" and not _opener(low, starts, common):
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


def _opener(low: str, starts: bool, common) -> bool:
    """Whether a capitalised word (lower-cased) is no name word: a common word opening a
    sentence, or a word `common` holds (`common` asked last: it may read sources)."""
    return (starts and (low in COMMON or low.endswith(("ing", "ly")))) or _common(low, common)


def _common(low: str, common) -> bool:
    """Whether `common` holds the word, its plural or (for a word in -s) its singular."""
    if not common:
        return False
    return _any_of(common, (low, low + "s", low[:-1]) if low.endswith("s") else (low, low + "s"))


def _any_of(common, words: tuple[str, ...]) -> bool:
    """Whether `common` holds one of `words`: a Lookup answers for them at once."""
    return common.any_of(words) if isinstance(common, Lookup) else any(w in common for w in words)


@lru_cache(maxsize=1)
def _runs() -> re.Pattern:
    """A pattern over a stretch of TOKEN_RE words that do not start with a capital (its last
    one is group 1) and of characters no word starts with, then the stretch of capitalised
    words that follows, with white space and lower-case connectors between them (`names_in`):
    its first word (group 2) and the rest (group 3). Words are matched whole, as TOKEN_RE
    reads them. Built on first use: the capitals are every letter of Unicode for which
    `isupper()` holds."""
    letter = re.compile(r"[^\W\d_]")
    caps = [c for c in map(chr, range(sys.maxunicode + 1)) if c.isupper() and letter.match(c)]
    ranges, start = [], 0
    for i in range(1, len(caps) + 1):
        if i == len(caps) or ord(caps[i]) != ord(caps[i - 1]) + 1:
            a, b = caps[start], caps[i - 1]
            ranges.append(re.escape(a) if a == b else f"{re.escape(a)}-{re.escape(b)}")
            start = i
    ranges.remove("A-Z")  # (asked first, alone: a long class is slow)
    cap = "(?:[A-Z]|(?=[^\\x00-\\x7f])[" + "".join(ranges) + "])"
    word = f"(?:{TOKEN_RE.pattern})"  # (the optional stretch ends the pattern: nothing backtracks into a word)
    name = f"(?={cap}){word}"
    stretch = rf"({name})((?:\s+(?:{_CONNECTOR}\s+)*{name})*)"
    return re.compile(rf"(?:[ -@\[-`{{-~]+|((?!{cap}){word})|[\W\d_])*(?:{stretch})?")


_ASCII_STRETCH = re.compile(rf"([A-Z]{_WORD_TAIL})((?:\s+(?:{_CONNECTOR}\s+)*[A-Z]{_WORD_TAIL})*)")
TOKEN_CHAR = re.compile(r"[^\W_]|['’\-]")  # (what a word of TOKEN_RE may hold)


@lru_cache(maxsize=1)
def _ascii_stretches() -> re.Pattern:
    """A pattern over an ASCII text (`stretches`): a capital that starts a word, with the rest
    of its word as TOKEN_RE reads it (group 1) and the stretch's other words (group 2); or a
    capital after a digit, an apostrophe or a hyphen (no group). Its first character is a
    capital, a digit, an apostrophe or a hyphen, so the search jumps over everything else."""
    first = r"[A-Z](?<![^\W_].)" + _WORD_TAIL
    return re.compile(rf"({first})((?:\s+(?:{_CONNECTOR}\s+)*[A-Z]{_WORD_TAIL})*)|[\d'\-][A-Z]")


@lru_cache(maxsize=1)
def _ascii_scan():
    """findall of a pattern over an ASCII text (`read_ascii`), one tuple a match: a capital that
    starts a word (group 1), the rest of its word as TOKEN_RE reads it (group 2) and the
    stretch's other words (group 3); a capital after a digit, an apostrophe or a hyphen (no
    group); a sentence end with no letter between it and a capital (group 4); or a number of
    NUMBER_RE, its first digit (group 5), the rest (group 6) and, when no letter but a capital
    comes next, what comes up to it (group 7). Every branch starts with one character of one
    class, so the search jumps to them."""
    word = rf"(?<![^\W_].)(?<!['\-].)(?<=(.))({_WORD_TAIL})((?:\s+(?:{_CONNECTOR}\s+)*[A-Z]{_WORD_TAIL})*)"
    number = r"(?<=(\d))(?<![\w.,]\d)(\d{0,2}(?:,\d{3})+|\d*(?:\.\d+)?)(?!\d)(?:(?=([^A-Za-z]*[A-Z])))?"
    return re.compile(rf"[A-Z.!?:;\n0-9](?:(?<=[A-Z])(?:{word}|(?<=[\d'\-].))|(?<=([.!?:;\n]))(?=[^A-Za-z]*[A-Z])"
                      rf"|{number})").findall


_SPACE = re.compile(r"(\s+)")


class Lookup:
    """A membership test that may answer for several words at once (`any_of`), as `names_in`
    asks for a word, its plural and its singular."""

    def __contains__(self, word: str) -> bool:
        raise NotImplementedError

    def any_of(self, words: tuple[str, ...]) -> bool:
        return any(w in self for w in words)


class Either(Lookup):
    """Membership in either of two collections (`b` asked first), without building their union."""

    def __init__(self, a, b):
        self.a, self.b = a, b

    def __contains__(self, x: str) -> bool:
        return x in self.b or x in self.a

    def any_of(self, words: tuple[str, ...]) -> bool:
        """Whether either holds one of `words`."""
        return _any_of(self.b, words) or _any_of(self.a, words)

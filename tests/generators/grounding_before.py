"""The grounding module as it was before its sources were read in cached pieces and the
lower-case stretches of a text were skipped by one pattern, frozen here (the project never
imports it): tests/generators/test_grounding_same.py checks that today's module gives exactly
its verdicts."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Iterable

from generators.corpus.names import WORD_NUMBERS

NUMBER_RE = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?!\d)")
WORD_RUN_RE = re.compile(r"\w+(?:-\w+)*")  # words joined by hyphens: "twenty-one", "one-time"
TOKEN_RE = re.compile(r"[^\W\d_][^\W_]*(?:['’\-][^\W\d_]+)*['’]?")
CONNECTORS = {"of", "the", "de", "van", "von", "la"}
SENTENCE_END = re.compile(r"[.!?:;\n]")
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

        def walk(v) -> None:
            if isinstance(v, dict):
                for x in v.values():
                    walk(x)
            elif isinstance(v, list):
                for x in v:
                    walk(x)
            elif isinstance(v, (str, int, float)) and not isinstance(v, bool):
                out.append(str(v))
        walk(value)
        return "\n".join(out)
    return content


def _norm(text: str) -> str:
    t = text.lower().replace("’", "'")
    t = re.sub(r"'s\b", "", t).replace("'", "")
    return " ".join(re.sub(r"[^\w]+", " ", t).split())


def _num(raw: str) -> str:
    raw = raw.replace(",", "")
    return str(float(raw)) if "." in raw else str(int(raw))


def numbers_in(text: str) -> list[str]:
    """Number values of `text` in order (digits, then number words)."""
    return [_num(m.group(1)) for m in NUMBER_RE.finditer(text)] + _word_numbers(text)


def _word_numbers(text: str) -> list[str]:
    """Number words of `text` in order; a hyphenated pair ("twenty-one") is one number, and
    in other hyphenated runs each part counts alone ("one-time" holds "one")."""
    out: list[str] = []
    for run in WORD_RUN_RE.findall(text.lower()):
        if run in WORD_NUMBERS:
            out.append(str(WORD_NUMBERS[run]))
            continue
        if "-" not in run:
            continue
        parts, i = run.split("-"), 0
        while i < len(parts):
            pair = "-".join(parts[i:i + 2]) if i + 1 < len(parts) else ""
            if pair in WORD_NUMBERS:
                out.append(str(WORD_NUMBERS[pair]))
                i += 2
                continue
            if parts[i] in WORD_NUMBERS:
                out.append(str(WORD_NUMBERS[parts[i]]))
            i += 1
    return out


def _small(n: str) -> bool:
    return "." not in n and int(n) < SMALL


def _lower_words(text: str) -> set[str]:
    return {w.lower().rstrip("'’") for w in set(TOKEN_RE.findall(text)) if w[0].islower()}


def names_in(text: str, common: set[str] = frozenset()) -> list[str]:
    """Capitalised names of `text` (module docstring); `common` adds words used in lower case."""
    out: list[str] = []
    run: list[str] = []
    pending: list[str] = []  # connectors seen after the run, kept only if a name word follows
    prev_end = 0

    def flush() -> None:
        if run:
            out.append(" ".join(run))
        run.clear()
        pending.clear()

    for m in TOKEN_RE.finditer(text):
        word, gap = m.group(), text[prev_end:m.start()]
        starts = prev_end == 0 or bool(SENTENCE_END.search(gap))
        prev_end = m.end()
        if gap.strip():
            flush()  # punctuation or a number between two words ends a name
        possessive = word.endswith(("'s", "’s", "'", "’"))
        bare = word[:-2] if word.endswith(("'s", "’s")) else word[:-1] if word.endswith(("'", "’")) else word
        low = bare.lower()
        if run and low in CONNECTORS and not possessive:
            pending.append(bare)
            continue
        plain = low in common or low + "s" in common or (low.endswith("s") and low[:-1] in common)
        is_name = bare[:1].isupper() and not plain and low != "i" and not (
            starts and (low in COMMON or low.endswith(("ing", "ly"))))
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


class Sources:
    """What a text may draw on: numbers, names and lower-case words of source texts."""

    def __init__(self, texts: Iterable[str] = ()):
        self._parts: list[str] = []
        self._text: str | None = None
        self.numbers: set[str] = set()
        self.lower: set[str] = set()
        for t in texts:
            self.add(t)

    def add(self, content: str) -> "Sources":
        norm, numbers, lower = _read(content or "")
        self._parts.append(norm)
        self._text = None
        self.numbers.update(numbers)
        self.lower |= lower
        return self

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = " " + " | ".join(self._parts) + " "
        return self._text

    def has_name(self, name: str) -> bool:
        key = _norm(name)
        return bool(key) and f" {key} " in self.text

    def ungrounded(self, text: str) -> list[tuple[str, str]]:
        """("number" | "name", mention) for every mention of `text` no source holds."""
        bad: list[tuple[str, str]] = []
        nums = numbers_in(text)
        grounded = [n for n in nums if n in self.numbers]
        for n in dict.fromkeys(nums):
            if n not in self.numbers and not _small(n) and not _derived(n, grounded):
                bad.append(("number", n))
            elif n not in grounded:
                grounded.append(n)
        common = self.lower | _lower_words(text)
        bad += [("name", n) for n in dict.fromkeys(names_in(text, common)) if not self.has_name(n)]
        return bad


def _read(content: str) -> tuple[str, frozenset[str], frozenset[str]]:
    """(normalised text, numbers, lower-case words) of a source, line by line: no mention
    spans a line, and the lines repeat across a dataset's conversations (the tool schemas of
    every system prompt, the passages tools return), so each line is read once."""
    parts = [_read_line(line) for line in plain_text(content).split("\n")]
    return (" ".join(p[0] for p in parts if p[0]), frozenset().union(*(p[1] for p in parts)),
            frozenset().union(*(p[2] for p in parts)))


@lru_cache(maxsize=8192)
def _read_line(line: str) -> tuple[str, frozenset[str], frozenset[str]]:
    return _norm(line), frozenset(numbers_in(line)), frozenset(_lower_words(line))


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
            if not set(nums) <= src.numbers:
                out.append(t)
        elif not src.has_name(t):
            out.append(t)
    return out

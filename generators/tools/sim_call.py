"""A call to the tool simulator and the small parts its answers are made of.

`SimCall` is one call (what `Simulator.call` takes); `results_message` is a search's answer,
`tool_error` and `unknown_tool` are the error answers every simulator writes; `AnyOf` finds an
answer's words in a text (the modes that hide answers use it); `Without` lets random.sample
read a sorted array less a few positions without copying it; `fast_check` compiles a tool's
JSON Schema once.
"""

from __future__ import annotations

import collections.abc
import json
import re
from dataclasses import dataclass
from json.encoder import encode_basestring
from functools import lru_cache
from typing import Any, Sequence

import fastjsonschema
import numpy as np

from generators.tools.base import canonical

MODES = ("good", "bad", "insufficient")


def tool_error(code: str, detail: str) -> str:
    """A tool's error answer as the simulator writes it: '{"error": code, "detail": detail}'."""
    return json.dumps({"error": code, "detail": detail}, ensure_ascii=False)


def results_message(results: Sequence[tuple[str, str, str]]) -> str:
    """A search's answer, '{"results": [{"doc_id": ..., "title": ..., "snippet": ...}, ...]}' for
    (doc id, title, snippet) triples: what json.dumps({"results": [...]}, ensure_ascii=False)
    writes, each string escaped by json's own encoder, without json walking the structure
    (every search call writes one)."""
    if not all(type(x) is str for r in results for x in r):
        return json.dumps({"results": [dict(zip(RESULT_KEYS, r)) for r in results]}, ensure_ascii=False)
    q = encode_basestring
    return '{"results": [' + ", ".join('{"doc_id": %s, "title": %s, "snippet": %s}' % (q(d), q(t), q(x))
                                        for d, t, x in results) + "]}"


RESULT_KEYS = ("doc_id", "title", "snippet")


def unknown_tool(name: str) -> str:
    """The answer to a call of a tool that is not offered (the unknown_tool case's result)."""
    return tool_error("unknown_tool", f"no tool named {name!r}")


@dataclass
class SimCall:
    """One tool call to answer (the arguments of `Simulator.call`)."""

    tool: str
    arguments: Any
    golden_doc_ids: Sequence[str] = ()
    mode: str = "good"
    k: int | None = None
    supporting: Sequence[str] = ()
    answers: Sequence[str] = ()

    def key(self) -> str | None:
        """The call as canonical JSON (equal calls, equal answers); None if it is not JSON."""
        try:
            return canonical([self.tool, self.arguments, list(self.golden_doc_ids), self.mode, self.k,
                              list(self.supporting), list(self.answers)])
        except (TypeError, ValueError):
            return None


class Without(collections.abc.Sequence):
    """The ints of a sorted array less a few of its positions, as a sequence that random.sample
    reads exactly as it reads the same ints in a list (without copying the array)."""

    def __init__(self, values: np.ndarray, dropped: list[int]):
        self.values, self.dropped = values, dropped  # dropped: positions in `values`, ascending

    def __len__(self) -> int:
        return len(self.values) - len(self.dropped)

    def __getitem__(self, j: int) -> int:
        if not 0 <= j < len(self):
            raise IndexError(j)
        for p in self.dropped:
            if p <= j:
                j += 1
            else:
                break
        return int(self.values[j])


class AnyOf:
    """Whether a text names any of some answers: each as whole words, case ignored (what
    `answer_pattern` finds). An ASCII answer in an ASCII text is found by `str.find` in the
    lower-cased text, which gives the pattern's verdict there without compiling it: most
    answers are asked once, and compiling cost more than searching."""

    def __init__(self, answers: Sequence[str]):
        self.answers = [a.strip() for a in dict.fromkeys(answers) if a.strip()]
        self._lower = [a.lower() if a.isascii() else None for a in self.answers]

    def search(self, text: str) -> bool:
        low = text.lower() if text.isascii() else None
        for answer, a in zip(self.answers, self._lower):
            if low is not None and a is not None:
                if _word_in(low, a):
                    return True
            elif answer_pattern(answer).search(text):
                return True
        return False


def _word_in(text: str, word: str) -> bool:
    """Whether `word` occurs in `text` with no word character (ASCII: a letter, a digit or
    "_") right before or after it: the pattern's lookarounds."""
    i = text.find(word)
    while i >= 0:
        j = i + len(word)
        if (i == 0 or not _is_word(text[i - 1])) and (j == len(text) or not _is_word(text[j])):
            return True
        i = text.find(word, i + 1)
    return False


def _is_word(c: str) -> bool:
    return c.isalnum() or c == "_"


@lru_cache(maxsize=1 << 15)
def answer_pattern(answer: str) -> re.Pattern:
    """One answer's pattern, compiled once: the answer as whole words, case ignored."""
    return re.compile(r"(?<!\w)" + re.escape(answer) + r"(?!\w)", re.I)


def answers_pattern(answers: tuple[str, ...]) -> AnyOf | None:
    found = AnyOf(answers)
    return found if found.answers else None


def fast_check(schema: dict):
    """A compiled validity check of `schema` (fastjsonschema), or None where it cannot compile.
    Compiled once a process per schema: every simulator of a bank checks with the same tools."""
    try:
        key = json.dumps({k: v for k, v in schema.items() if k != "$schema"}, sort_keys=True)
    except (TypeError, ValueError):  # not JSON: no schema fastjsonschema could compile either
        return None
    return _compiled(key)


@lru_cache(maxsize=4096)
def _compiled(schema: str):
    try:
        return fastjsonschema.compile(json.loads(schema))
    except (fastjsonschema.JsonSchemaDefinitionException, ValueError, TypeError):
        return None

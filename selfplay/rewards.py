"""The examiner's reward and the count of student attempts that solved a task.

A task is worth most when the students solve it sometimes but not always: with k of n
attempts right, the examiner earns (n - k) / (n - 1) for 0 < k < n (1 when one attempt is
right, falling as more are), nothing for a task no attempt or every attempt solves, plus
half a point for a well-formed output:

    examiner_reward(format_ok, k, n) = 0.5 * format_ok + 1(0 < k < n) * (n - k) / (n - 1)

`solve_count` counts the attempts whose answer matches the gold answer or an alias after
the project's answer normalisation (generators.answers.match, the same exact match as the
training reward).
"""

from __future__ import annotations

from typing import Iterable

from generators.answers import match

FORMAT_WEIGHT = 0.5


def examiner_reward(format_ok: bool, k: int, n: int) -> float:
    """0.5 for a well-formed output plus (n - k) / (n - 1) when 0 < k < n of n attempts solved it."""
    if n < 2:
        raise ValueError(f"the examiner reward needs at least 2 student attempts, got n={n}")
    if not 0 <= k <= n:
        raise ValueError(f"k must be between 0 and n={n}, got {k}")
    solvable = (n - k) / (n - 1) if 0 < k < n else 0.0
    return FORMAT_WEIGHT * float(bool(format_ok)) + solvable


def solve_count(answers: Iterable[str | None], gold: str, aliases: Iterable[str] = ()) -> int:
    """How many of the students' answers (None: no answer) match `gold` or an alias exactly
    after normalisation."""
    aliases = [a for a in aliases if isinstance(a, str)]
    return sum(1 for a in answers if isinstance(a, str) and match(a, gold, aliases).em)

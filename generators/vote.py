"""Majority vote over a prompt's sampled answers: answers are clustered by equality after the
project's answer normalisation (generators.answers.normalize, the same as the exact-match
reward), the pseudo-label is the largest cluster (ties go to the cluster whose first answer
came earliest), and the vote share is its size over n. A missing answer (None, or empty after
normalisation) joins no cluster.

    v = vote(["Paris", "paris.", "Rome", None])
    v.label, v.share, v.sizes, v.members  # "Paris", 0.5, (2, 1), ((0, 1), (2,))

`rewards(v, label)` gives each response's reward against a label (1 if its answer matches),
the pseudo rewards with `v.label` and the true ones with the true label.
"""

from __future__ import annotations

from dataclasses import dataclass

from generators.answers import match, normalize


@dataclass(frozen=True)
class Vote:
    """The clusters of one prompt's n answers, largest first (ties: earliest first)."""

    answers: tuple[str | None, ...]
    members: tuple[tuple[int, ...], ...]  # response indices per cluster

    @property
    def n(self) -> int:
        return len(self.answers)

    @property
    def label(self) -> str | None:
        """The pseudo-label: the first answer of the largest cluster (None: no answer at all)."""
        return self.answers[self.members[0][0]] if self.members else None

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(len(m) for m in self.members)

    @property
    def share(self) -> float:
        return self.sizes[0] / self.n if self.members and self.n else 0.0

    @property
    def valid(self) -> float:
        """The share of responses with an answer."""
        return sum(self.sizes) / self.n if self.n else 0.0


def vote(answers) -> Vote:
    """Cluster `answers` (module docstring)."""
    answers = tuple(answers)
    clusters: dict[str, list[int]] = {}
    for i, a in enumerate(answers):
        key = normalize(a) if isinstance(a, str) else ""
        if key:
            clusters.setdefault(key, []).append(i)
    ordered = sorted(clusters.values(), key=lambda m: (-len(m), m[0]))
    return Vote(answers, tuple(tuple(m) for m in ordered))


def rewards(v: Vote, label: str | None, aliases=()) -> list[float]:
    """1.0 for each response whose answer matches `label` (or an alias) exactly, else 0.0."""
    if label is None:
        return [0.0] * v.n
    return [float(isinstance(a, str) and match(a, label, list(aliases)).em) for a in v.answers]

"""The steps a trajectory skeleton is made of: a tool call with what replay needs (`Call`), a
text the LLM writes (`Slot`) and a turn (`Turn`: its calls after the think of its slot).
generators/synth/skeleton.py builds them; the reflection cases (generators/synth/cases.py) add
their own."""

from __future__ import annotations

from dataclasses import dataclass, field

from generators.synth.plan import Hop


@dataclass
class Call:
    id: str
    tool: dict  # the offered tool row
    arguments: dict
    hop: Hop
    mode: str = "good"
    golden: list[str] = field(default_factory=list)
    supporting: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    injected_error: str | None = None
    result: str = ""
    retrieved: str | None = None  # a hash of the retriever's results for the call (not with bm25)

    def replay_key(self) -> dict:
        key = {"tool": self.tool["name"], "mode": self.mode, "golden_doc_ids": self.golden,
               "supporting": self.supporting, "answers": self.answers}
        if self.retrieved is not None:
            key["retrieved"] = self.retrieved
        return key


@dataclass
class Slot:
    """A piece of text the LLM writes: `kind` says what the reasoning must cover."""

    kind: str  # plan | next | fix_args | switch_tool | escalate | no_tool | early_stop | compute | final | answer
    facts: dict  # with "again" (the repeat case): the lookups the turn before made a second time (set by `build`)
    sources: list[str] | None = None  # question + earlier tool results (None: not recorded)


@dataclass
class Turn:
    calls: list[Call]
    slot: Slot

"""What the rules layer needs besides a record (`RuleContext`): the simulator for replay, the
dataset's documents for the triple and task rules, the options of the layer, and the replayed
answers of the chunk being checked (validators/replay.py asks for them in one batch), with
their plain texts, which the grounding step reads instead of parsing the messages again.

    ctx = RuleContext(simulator_for=lambda seed: Simulator(docs, seed=seed), documents=docs)
    ctx.prefetch(requests)          # one batched ask per seed; ctx.replay_call reads from it
    ctx.forget()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from validators.replay import request_key


@dataclass
class RuleContext:
    """What the rules may need besides the record: a simulator factory for replay and the
    dataset's documents (doc_id -> (title, text)) for the triple and task rules; `final_facts`
    off leaves that step out (validators/final_facts.py)."""

    simulator_for: Callable[[int], Any] | None = None  # seed -> Simulator, None = no corpus
    answer_min_f1: float = 1.0
    replay: bool = True
    documents: dict[str, tuple[str, str]] | None = None  # None = documents unknown
    final_facts: bool = True
    _replays: dict = field(default_factory=dict, repr=False)  # the answers of the batch being checked
    texts: dict = field(default_factory=dict, repr=False)  # their plain texts (Simulator.answers), for grounding (validators/replay.py)
    derive_cache: dict = field(default_factory=dict, repr=False)  # facts per document (derive.check_triple)

    def replay_call(self, seed: int, name: str, args: Any, key: dict) -> str:
        """The simulator's answer to one recorded call: from the prefetched batch, else asked now."""
        out = self._replays.get(request_key(seed, name, args, key)) if self._replays else None
        if out is None:
            return self.simulator_for(seed).call(
                name, args, golden_doc_ids=key.get("golden_doc_ids", ()), mode=key.get("mode", "good"),
                supporting=key.get("supporting", ()), answers=key.get("answers", ()))
        if isinstance(out, Exception):
            raise out
        return out

    def prefetch(self, requests: list[tuple[int, str, Any, dict]]) -> None:
        """Answer many recorded calls at once (validators/replay.py), one batch per seed."""
        if not self.replay or self.simulator_for is None:
            return
        from generators.tools.simulator import SimCall

        by_seed: dict[int, dict[str, SimCall]] = {}
        for seed, name, args, key in requests:
            ck = request_key(seed, name, args, key)
            if ck not in self._replays and isinstance(key, dict):
                by_seed.setdefault(seed, {})[ck] = SimCall(
                    name, args, key.get("golden_doc_ids", ()), key.get("mode", "good"), None,
                    key.get("supporting", ()), key.get("answers", ()))
        for seed, calls in by_seed.items():  # (the request keys name the calls: equal calls, equal keys)
            self._replays.update(zip(calls, self.simulator_for(seed).answers(list(calls.values()), list(calls),
                                                                             self.texts)))

    def retriever_of(self, seed: int) -> dict:
        """{"retriever": name, "fingerprint": ...} of the simulator that replays (validators/replay.py)."""
        return self.simulator_for(seed).retriever

    def retrieved(self, seed: int, name: str, args: Any, key: dict) -> str | None:
        """The hash of the retriever's results for a recorded call's search, as synthesis records it."""
        from generators.tools.simulator import SimCall

        return self.simulator_for(seed).retrieved(SimCall(name, args, key.get("golden_doc_ids", ()),
                                                          key.get("mode", "good")))

    def forget(self) -> None:
        """Drop the prefetched answers (a chunk's batch is not kept for the next)."""
        self._replays.clear()
        self.texts.clear()

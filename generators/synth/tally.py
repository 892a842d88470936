"""What a synthesis run reports: `Tally` adds up its chunks' stats (seconds, texts asked
for, where each text came from, overall and per slot kind), `mix_report` counts a chunk's
trajectories per case and route.

    tally = Tally(); tally.add(stats)          # stats: Session.finish's, with "write_s", "mix"
    tally.slot_report()["final"]["llm_share"]
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Tally:
    """What the chunks of a synthesis run add up to: seconds in the program, the LLM and
    writing, texts asked for, case and route mix, where each text came from (overall and per
    slot kind: `by_slot["final"]["template:ungrounded"]`)."""

    program_s: float = 0.0
    llm_s: float = 0.0
    write_s: float = 0.0
    slots: int = 0
    case: Counter = field(default_factory=Counter)
    route: Counter = field(default_factory=Counter)
    sources: Counter = field(default_factory=Counter)
    fallbacks: Counter = field(default_factory=Counter)
    by_slot: dict = field(default_factory=dict)

    def add(self, stats: dict) -> None:
        """Add one chunk's stats (Session.trajectories' stats, with "write_s" and "mix")."""
        self.program_s += stats["program_s"]
        self.llm_s += stats["llm_s"]
        self.write_s += stats.get("write_s", 0.0)
        self.slots += stats["slots"]
        self.case.update(stats["mix"]["case"])
        self.route.update(stats["mix"]["route"])
        self.sources.update(stats["sources"])
        self.fallbacks.update(stats["fallbacks"])
        for kind, sources in stats.get("by_slot", {}).items():
            self.by_slot.setdefault(kind, Counter()).update(sources)

    def slot_report(self) -> dict[str, dict]:
        """Per slot kind: texts, the share the model wrote, and the fallback reasons."""
        out = {}
        for kind, c in sorted(self.by_slot.items()):
            n = sum(c.values())
            out[kind] = {"texts": n, "llm_share": round(c["llm"] / n, 4) if n else 0.0,
                         "fallbacks": {k: v for k, v in c.most_common() if k != "llm"}}
        return out


def mix_report(rows: list[dict]) -> dict[str, dict[str, int]]:
    """Counts per case, per route and per (route, case) of trajectory rows."""
    return {"case": dict(Counter(r["case"] for r in rows)),
            "route": dict(Counter(r["route"] for r in rows)),
            "route x case": dict(Counter(f"{r['route']}/{r['case']}" for r in rows))}

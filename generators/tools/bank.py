"""The virtual tool bank: the base tools (generators.tools.base), the calculator
(generators.tools.compute) when asked for, and paraphrased variants of the search tools
(generators.tools.variants) accepted by dual gating (generators.tools.gating).

    from generators.tools.bank import build_bank
    from generators.llm.toolcalls import render_tools_block
    tools = build_bank(seed=7, variants_per_tool=3)      # list of `tools` rows
    print(render_tools_block(tools[:3]))                 # <tools> ... </tools> for a system prompt
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from generators.tools import gating, variants
from generators.tools.base import BASE_BY_DOMAIN, DOMAINS, base_rows, make_row
from generators.tools.compute import calculator_row


@dataclass
class BankBuild:
    """The outcome of building a bank: the tool rows and every gated candidate."""

    tools: list[dict] = field(metadata={"help": "base rows then accepted variant rows, per domain"})
    candidates: list = field(metadata={"help": "GateResult per candidate (accepted and rejected)"})

    @property
    def accepted(self) -> list:
        return [c for c in self.candidates if c.accepted]

    @property
    def rejected(self) -> list:
        return [c for c in self.candidates if not c.accepted]

    def reasons(self) -> dict[str, int]:
        """Count of candidates per decision reason."""
        out: dict[str, int] = {}
        for c in self.candidates:
            out[c.reason] = out.get(c.reason, 0) + 1
        return dict(sorted(out.items()))


def generate_bank(seed: int = 0, variants_per_tool: int = 3, backend=None, gate_config=None,
                  domains: Sequence[str] = DOMAINS, candidates_per_tool: int | None = None,
                  embedder=None, reserved_names: Sequence[str] = (), calculator: bool = False) -> BankBuild:
    """Base tools (and the calculator) plus up to `variants_per_tool` gated paraphrases of each
    search tool.

    Rule paraphrases are deterministic for `seed`; with a `backend` (generators.llm
    protocol) LLM proposals are gated first and rule paraphrases fill the remaining slots.
    No variant takes a name in `reserved_names` (e.g. the dataset's imported tools).
    """
    gate = gating.Gate(config=gate_config, embedder=embedder)
    rows = [r for r in base_rows() if r["domain"] in domains] + ([calculator_row()] if calculator else [])
    by_domain = {r["domain"]: r for r in rows}
    results: list = []
    used_names = {r["name"] for r in base_rows() + [calculator_row()]} | set(reserved_names)
    n_cand = candidates_per_tool or max(8, variants_per_tool * 6)
    for domain in domains:
        base = BASE_BY_DOMAIN[domain]
        proposals: list = []
        if backend is not None and variants_per_tool > 0:
            proposals += variants.llm_candidates(base, backend, n=variants_per_tool * 2, seed=seed)
        proposals += variants.rule_candidates(base, seed=seed, n=n_cand)
        gated = gate.select(base, proposals, keep=variants_per_tool, used_names=used_names)
        results += gated
        for g in gated:
            if g.accepted:
                rows.append(make_row(domain, g.name, g.description, g.parameters, by_domain[domain]["tool_id"],
                                     {"method": g.method, "seed": seed, **g.scores}))
    return BankBuild(tools=rows, candidates=results)


def build_bank(seed: int = 0, variants_per_tool: int = 3, backend=None, gate_config=None,
               calculator: bool = False) -> list[dict]:
    """Tool rows (bases and the calculator first, then accepted variants), deterministic for a
    seed on the rule path."""
    return generate_bank(seed, variants_per_tool, backend=backend, gate_config=gate_config, calculator=calculator).tools

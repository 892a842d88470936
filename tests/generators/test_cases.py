"""A reflection case is one part plus one registry entry (generators/synth/cases.py): a toy case,
declared here in one place (its plan rule, its skeleton step, its slot text), goes through
synthesis, the commit and validation with the default layers like the built-in cases."""

from __future__ import annotations

from flows.synthesize import run as synthesize
from flows.validate import run as validate
from generators.corpus.build import WorldConfig, write
from generators.llm.registry import BackendConfig
from generators.synth.cases import CASES, Case, SlotText
from generators.synth.synthesize import SynthConfig
from generators.tools.base import GENERAL
from storage import load_table
from validators.validator import ValidateConfig

CHECK = SlotText("double_check", lambda f: f'Next step: make sure of "{f["query"]}" with the general search {f["general"]}.',
                 lambda f: [f["query"], f["general"]],
                 lambda f: f'To be sure about "{f["query"]}", I will also search for it with {f["general"]}.')


class DoubleCheck(Case):
    """A toy case: after the round of its target lookup, the same lookup again with the general
    search, after a think that says why; only plans of two rounds or more take it."""

    name = "double_check"
    slots = (CHECK,)

    def allows(self, rounds):
        return len(rounds) >= 2

    def needs_general(self, rounds):
        return True

    def after_round(self, d, calls):
        first = next((c for c in calls if c.hop is d.target), None)
        if first is not None and first.tool["name"] != d.chosen[GENERAL]["name"]:
            general = d.chosen[GENERAL]
            d.add(d.slot("double_check", {"query": first.hop.query, "general": general["name"]}),
                  d.call(0, general, d.args(first.hop, general), first.hop))


def test_a_toy_case_declared_in_one_place_is_synthesized_and_validated(tmp_path, monkeypatch):
    write(WorldConfig(seed=11, entities=300), tmp_path, "w")
    monkeypatch.setitem(CASES, "double_check", DoubleCheck())  # the one registry entry
    cfg = SynthConfig(dataset="w", n=24, seed=5, texts="template", case_mix="double_check=1,clean=1", chunk=8)
    synthesize(cfg, BackendConfig(), tmp_path, progress=False)
    rows = load_table("w", "trajectories", tmp_path).to_pylist()
    toy = [r for r in rows if r["case"] == "double_check"]
    assert toy and len(rows) == 24 and {r["case"] for r in rows} == {"double_check", "clean"}
    said = [m["content"] for r in toy for m in r["messages"] if "To be sure about" in (m["content"] or "")]
    assert len(said) >= len(toy)  # the case's own think, written from its slot text

    summary = validate(ValidateConfig(dataset="w"), data_root=tmp_path, progress=False)
    verdicts = load_table("w", "verdicts", tmp_path).to_pylist()
    failed = [(v["check"], v["reason"]) for v in verdicts if not v["passed"]]
    assert not failed and summary["rows_out"] == 24, failed[:5]

"""Synthesis options that shape the data for small models: compact tool signatures in the
system prompt, a fixed top_k on every call, and program-written texts (no model loaded)."""

import json

import pytest

from generators.llm.toolcalls import compact_signature, render_tools_block
from generators.synth.synthesize import Session, SynthConfig, load_inputs
from generators.tools.bank import build_bank


def test_compact_signature_marks_optional_args_enums_and_first_sentence():
    tool = {"name": "find", "description": "Find a place. Returns long passages about it.",
            "parameters": {"type": "object", "required": ["query"], "properties": {
                "query": {"type": "string"}, "top_k": {"type": "integer"},
                "kind": {"type": "string", "enum": ["city", "river"]}}}}
    assert compact_signature(tool) == "find(query: string, top_k?: integer, kind?: city|river) - Find a place."
    calc = next(t for t in build_bank(seed=1, variants_per_tool=0, calculator=True) if t["name"] == "calculate")
    assert compact_signature(calc).endswith("its value, e.g. the number of years between two dates.")  # not cut at "e.g."
    bank = build_bank(seed=1, variants_per_tool=1)
    full, compact = render_tools_block(bank), render_tools_block(bank, "compact")
    assert compact.count("\n") == full.count("\n") == len(bank) + 1
    assert len(compact) < len(full) / 2
    with pytest.raises(ValueError, match="tool style"):
        render_tools_block(bank, "fancy")


def test_template_texts_compact_tools_and_fixed_top_k(tmp_path):
    from generators.corpus.build import WorldConfig, write

    write(WorldConfig(seed=4, entities=120), tmp_path, "w")
    cfg = SynthConfig(dataset="w", n=10, tool_style="compact", top_k_rate=1.0, top_k="2", texts="template")
    s = Session(load_inputs(tmp_path, "w"), cfg, build_bank(seed=4, variants_per_tool=1))
    rows, stats = s.trajectories(s.plans(), None, "run")
    assert len(rows) == 10 and stats["sources"] == {"template": stats["slots"]}
    for r in rows:
        system = r["messages"][0]["content"]
        assert '"type": "function"' not in system
        for t in r["tools"]:
            assert f"\n{t['name']}(" in system
        for m in r["messages"]:
            for c in m["tool_calls"] or []:
                args = json.loads(c["arguments"])
                if not c["injected_error"]:
                    assert args["top_k"] == 2


@pytest.mark.parametrize("bad", [{"tool_style": "fancy"}, {"texts": "human"}, {"top_k": "0,3"}, {"top_k": "x"}])
def test_bad_synth_options_are_rejected(bad):
    with pytest.raises(ValueError):
        SynthConfig(**bad)


def test_cli_bad_option_is_a_readable_error(tmp_path):
    from typer.testing import CliRunner

    from flows.cli import app

    res = CliRunner().invoke(app, ["--data-root", str(tmp_path), "synthesize", "--tool-style", "fancy"])
    assert res.exit_code == 2 and "synthesize failed" in res.output and "--tool-style" in res.output

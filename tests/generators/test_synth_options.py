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


# what `synthesize --reasoning brief` made before `facts` became the default (the same world, seed
# and options): its run id, and the first of its trajectory ids by value
BRIEF_RUN = "synth-7057fa333a7f"
BRIEF_IDS = ["18ad8ac506dbc3d38eac5c55", "2bb53ba53b98cb151f17818c", "46b69e7376487b97a2fbb43c",
             "4e28bb3d10515367151e2400", "7226a75753bc37a0de850eef", "97bbc58d380c6f4ad454c324"]


def test_reasoning_brief_keeps_its_ids_and_the_default_makes_new_ones(tmp_path):
    """`--reasoning brief` gives the run and trajectory ids it gave when it was the default (an
    option at the value it had then stays out of the run's id: LATER_DEFAULTS), so a rerun of an
    older brief run resumes it; the default, `facts`, is another run with other ids."""
    from flows.synthesize import run
    from generators.corpus.build import WorldConfig, write
    from generators.llm.registry import BackendConfig
    from storage import load_table

    root = tmp_path / "data"
    write(WorldConfig(seed=4, entities=120), root, "w")
    ids = {}
    for reasoning in ("brief", "facts"):
        cfg = SynthConfig(dataset="w", n=12, seed=7, texts="template", **({"reasoning": "brief"} if reasoning == "brief" else {}))
        summary = run(cfg, BackendConfig(), root, progress=False)
        ids[reasoning] = (summary["run_id"], sorted(load_table("w", "trajectories", root, run_id=summary["run_id"])
                                                    .column("traj_id").to_pylist()))
    assert SynthConfig().reasoning == "facts"
    assert ids["brief"][0] == BRIEF_RUN and len(ids["brief"][1]) == 12 and ids["brief"][1][:6] == BRIEF_IDS
    assert ids["facts"][0] != BRIEF_RUN and not set(ids["facts"][1]) & set(ids["brief"][1])

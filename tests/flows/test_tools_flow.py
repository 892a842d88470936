"""`forgeplay tools import` then the real `synthesize` Prefect flow (template texts, no model):
the flow loads the dataset's imported tools, offers and calls them, and a new import makes a
new run."""

import json

from typer.testing import CliRunner

from flows import cli
from flows.synthesize import run
from generators.corpus.build import WorldConfig, write
from generators.llm.registry import BackendConfig
from generators.synth.synthesize import SynthConfig
from storage import load_table
from tests.generators.test_tool_import import BAD_LINES, BAD_START, GENERAL_TOOL, bank_file


def test_cli_import_then_synthesize_flow(tmp_path):
    root = tmp_path / "data"
    write(WorldConfig(seed=3, entities=200), root, "w")
    runner = CliRunner()
    person = bank_file(tmp_path / "person.jsonl")
    out = runner.invoke(cli.app, ["--data-root", str(root), "tools", "import", str(person), "--dataset", "w",
                                  "--domain", "person"])
    assert out.exit_code == 0, out.output
    assert "2 new tools" in out.output and f"{person}:{BAD_START}: invalid JSON" in out.output
    assert f"{person}:{BAD_START + len(BAD_LINES) - 1}: duplicate name 'search_person'" in out.output
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n")
    out = runner.invoke(cli.app, ["--data-root", str(root), "tools", "import", str(junk), "--dataset", "w"])
    assert out.exit_code == 1 and f"{junk}:1: invalid JSON" in out.output

    cfg = SynthConfig(dataset="w", n=24, chunk=12, texts="template", variants_per_tool=0)
    first = run(cfg, BackendConfig(), root, progress=False)
    rows = load_table("w", "trajectories", root, run_id=first["run_id"]).to_pylist()
    called = {c["name"] for r in rows for m in r["messages"] for c in m["tool_calls"] or []}
    assert first["written"] == 24 and {"renwu_dangan_chaxun", "ziliao_jiansuo-quanwen"} <= called
    assert "imported=2" in first["report"]

    general = tmp_path / "general.jsonl"
    general.write_text(json.dumps(GENERAL_TOOL, ensure_ascii=False) + "\n", encoding="utf-8")
    assert runner.invoke(cli.app, ["--data-root", str(root), "tools", "import", str(general), "--dataset", "w"]).exit_code == 0
    second = run(cfg, BackendConfig(), root, progress=False)
    assert second["run_id"] != first["run_id"] and second["written"] == 24  # the bank changed: a new run

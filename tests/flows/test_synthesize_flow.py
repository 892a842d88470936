"""The `synthesize` Prefect flow on a real world corpus, with a real (tiny, random-weight)
transformers model behind the backend: shards, report, saved config, idempotent rerun."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows.synthesize import run
from generators.corpus.build import WorldConfig, write
from generators.llm.registry import BackendConfig
from generators.synth.synthesize import SynthConfig
from storage import Catalog, load_table

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def world_root(tmp_path):
    root = tmp_path / "data"
    write(WorldConfig(seed=3, entities=200), root, "w")
    return root


def test_flow_writes_tools_and_trajectories_and_reruns_without_duplicates(world_root, tiny_llama_dir):
    cfg = SynthConfig(dataset="w", n=10, chunk=4, max_think_tokens=12, variants_per_tool=1)
    bcfg = BackendConfig(model=str(tiny_llama_dir), batch_size=16)
    first = run(cfg, bcfg, world_root, progress=False)
    assert first["written"] == 10 and sum(first["case"].values()) == 10
    assert "| synthesize |" in first["report"] and "## case" in first["report"]
    assert first["usage"]["requests"] > 0 and first["usage"]["completion_tokens"] > 0
    assert first["llm_seconds"] >= first["usage"]["seconds"] > 0  # the model answers in this process: counted
    by_slot = first["texts_by_slot"]  # per slot kind: texts, model share, fallback reasons
    assert by_slot["final"]["texts"] == by_slot["answer"]["texts"] == 10
    assert sum(r["texts"] for r in by_slot.values()) == sum(first["text_sources"].values())
    assert all(sum(r["fallbacks"].values()) == round(r["texts"] * (1 - r["llm_share"])) for r in by_slot.values())
    assert "final: template:" in first["report"]
    with Catalog(world_root) as cat:
        assert cat.scalar("SELECT count(*) FROM w_trajectories") == 10
        assert cat.scalar("SELECT count(DISTINCT name) FROM w_tools") >= 7
        assert cat.scalar("SELECT count(*) FROM w_trajectories WHERE lineage.backend = 'transformers'") == 10
    saved = json.loads((world_root / "w" / "_runs" / f"{first['run_id']}.json").read_text())
    assert saved["config"]["synth"]["n"] == 10 and saved["summary"]["written"] == 10

    again = run(cfg, bcfg, world_root, progress=False)
    assert again["run_id"] == first["run_id"] and again["written"] == 0 and again["skipped_committed"] == 10
    ids = load_table("w", "trajectories", world_root).column("traj_id").to_pylist()
    assert len(ids) == len(set(ids)) == 10
    assert load_table("w", "tools", world_root).num_rows == len(set(load_table("w", "tools", world_root)
                                                                    .column("tool_id").to_pylist()))


def test_missing_inputs_give_a_clear_error(tmp_path, tiny_llama_dir):
    with pytest.raises(ValueError, match="needs documents and triples"):
        run(SynthConfig(dataset="empty", n=2), BackendConfig(model=str(tiny_llama_dir)), tmp_path, progress=False)


@pytest.mark.slow
def test_cli_synthesize_with_the_embedded_model(world_root, embedded_dir, model_cache):
    env = {**os.environ, "FORGEPLAY_DATA": str(world_root), "FORGEPLAY_CACHE": str(model_cache)}
    out = subprocess.run([sys.executable, "-m", "flows.cli", "synthesize", "--dataset", "w", "--n", "4",
                          "--chunk", "4", "--max-think-tokens", "40", "--variants-per-tool", "1"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "program share" in out.stdout
    rows = load_table("w", "trajectories", world_root).to_pylist()
    assert len(rows) == 4
    sources = [s for r in rows for s in json.loads(r["meta"])["text_sources"]]
    assert any(s == "llm" for s in sources), sources  # the real model wrote some of the reasoning

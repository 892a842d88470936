"""Triples built from documents alone (`forgeplay corpus questions`, the scripted stand-in
model) feed what triples feed: synthesis with a held-out split, validation, held-out
evaluation (`train eval`, a tiny random model) and both exports (verl with the tool agent,
TRL), each reading the built questions, answers and golden passages."""

from __future__ import annotations

import pyarrow.parquet as pq

from flows.synthesize import run as synthesize
from flows.validate import run as validate
from generators.llm.registry import BackendConfig
from generators.llm.scripted import ScriptedBackend
from generators.synth.synthesize import SynthConfig
from storage import load_table
from tests.generators.chain_corpus import write_corpus
from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401 (fixtures)
from train.evaluate import EvalConfig, run_eval
from train.export import export_trl
from train.verl_export import export_verl
from validators.chain_run import QuestionsConfig, run_questions
from validators.validator import ValidateConfig


def test_eval_and_exports_read_triples_built_from_documents(tmp_path, tiny_llama_dir, embedded_tokenizer_dir):  # noqa: F811
    root = tmp_path / "data"
    write_corpus(root, "docs")
    run_questions(QuestionsConfig(dataset="docs", max_chains=60, chunk=16), BackendConfig(), root,
                  backend=ScriptedBackend())
    built = {t["triple_id"]: t for t in load_table("docs", "triples", root).to_pylist()}
    assert len(built) >= 4
    held = sorted(built)[:2]
    split = tmp_path / "held_out.txt"
    split.write_text("\n".join(held) + "\n")

    synth = synthesize(SynthConfig(dataset="docs", n=len(built) - 2, per_triple=1, texts="template", hold_out=str(split)),
                       BackendConfig(), root, progress=False)
    trajectories = load_table("docs", "trajectories", root).to_pylist()
    assert synth["written"] == len(trajectories) == len(built) - 2
    assert {r["triple_id"] for r in trajectories} == set(built) - set(held)  # the split stayed out
    validate(ValidateConfig(dataset="docs"), data_root=root, progress=False)
    assert load_table("docs_valid", "trajectories", root).num_rows > 0

    s = run_eval(EvalConfig(data="docs", model=str(tiny_llama_dir), hold_out=str(split), max_turns=2,
                            max_new_tokens=12), root, progress=False)
    assert s["rollouts"] == 2 and set(s["by_qtype"]) <= {"bridge/2", "bridge/3"}
    assert sum(v["rollouts"] for v in s["by_qtype"].values()) == 2

    verl = export_verl("docs", tmp_path / "verl", root, test_fraction=0.0, tool_agent=True,
                       tokenizer=embedded_tokenizer_dir)
    rows = pq.read_table(tmp_path / "verl" / "train.parquet").to_pylist()
    assert verl.files["train.parquet"] == len(rows) > 0 and verl.tools_in
    questions = {t["question"] for t in built.values()}
    assert {r["extra_info"]["question"] for r in rows} <= questions
    assert {r["reward_model"]["ground_truth"] for r in rows} <= {t["answer"] for t in built.values()}
    assert {r["extra_info"]["kind"] for r in rows} == {"triples", "trajectories"}

    counts = export_trl("docs", tmp_path / "trl", root, test_fraction=0.0)
    grpo = pq.read_table(tmp_path / "trl" / "grpo_train.parquet").to_pylist()
    sft = pq.read_table(tmp_path / "trl" / "sft_train.parquet").to_pylist()
    assert counts["grpo_train.parquet"] == len(grpo) > 0 and counts["sft_train.parquet"] == len(sft) > 0
    assert {g["answer"] for g in grpo} <= {t["answer"] for t in built.values()}
    assert all(any(q in m["content"] for q in questions for m in r["messages"] if m["role"] == "user") for r in sft)

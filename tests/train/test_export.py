"""train/export.py, train/verl_export.py, train/reward.py and `forgeplay export`: files load with
`datasets.load_dataset("parquet")` and carry the exact Arrow types verl and TRL read
(the tool-agent export and verl's own loaders: tests/train/test_export_verl.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from generators.corpus.build import WorldConfig, write
from generators.llm.scripted import ScriptedBackend
from generators.synth.synthesize import Session, SynthConfig, load_inputs
from generators.tools.bank import build_bank
from storage import load_table, write_rows
from train.export import export_trl, split_of
from train.reward import answer_reward
from train.verl_export import export_verl

STR, I64 = pa.string(), pa.int64()
CHAT = pa.list_(pa.struct([("role", STR), ("content", STR)]))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """triples from a small world, its tool bank, trajectories, one task, and one failed verdict."""
    root = tmp_path_factory.mktemp("data")
    write(WorldConfig(seed=3, entities=200), root, "w")
    bank = build_bank(seed=3, variants_per_tool=1)
    s = Session(load_inputs(root, "w"), SynthConfig(dataset="w", n=12), bank)
    rows, _ = s.trajectories(s.plans(), ScriptedBackend(), "run")
    write_rows(root, "w", "trajectories", "run", rows)
    write_rows(root, "w", "tools", "run", bank)
    write_rows(root, "w", "tasks", "sp", [{"task_id": "t1", "question": "Who built the tower?", "answer": "Ada",
                                           "aliases": ["Ada L."], "qcp": {"seed_doc_id": None, "hops": []},
                                           "hop_count": 2, "examiner_step": 0}])
    write_rows(root, "w", "verdicts", "v", [{"record_id": rows[0]["id"], "record_kind": "trajectories",
                                             "layer": "rules", "check": "answer", "passed": False}])
    return root


def _field_types(t: pa.DataType) -> dict:
    return {f.name: f.type for f in t}


def test_verl_files_have_verl_types_and_load(root, tmp_path, embedded_tokenizer_dir):
    r = export_verl("w", tmp_path, root, test_fraction=0.2, tokenizer=embedded_tokenizer_dir)
    counts = r.files
    triples = load_table("w", "triples", root).num_rows
    trajs = load_table("w", "trajectories", root).to_pylist()
    assert sum(counts.values()) == triples + 1  # + the task; without --tool-agent no trajectory prompt
    assert r.left_out == len(trajs) - 1 and not r.tools_in  # all but the rejected one, which is never counted
    schema = pq.read_schema(tmp_path / "train.parquet")
    assert schema.field("data_source").type == STR and schema.field("ability").type == STR
    assert schema.field("prompt").type == CHAT
    assert _field_types(schema.field("reward_model").type) == {"style": STR, "ground_truth": STR}
    extra = _field_types(schema.field("extra_info").type)
    assert extra["index"] == I64 and extra["split"] == STR and extra["hop_count"] == I64
    assert extra["aliases"] == pa.list_(STR) and extra["need_tools_kwargs"] == pa.bool_()
    assert "tools_kwargs" not in extra  # no tool rows, so no tool columns
    ds = datasets.load_dataset("parquet", data_files={"train": str(tmp_path / "train.parquet"),
                                                      "test": str(tmp_path / "test.parquet")})
    assert ds["train"].num_rows == counts["train.parquet"] and ds["test"].num_rows == counts["test.parquet"] > 0
    rows = list(ds["train"]) + list(ds["test"])
    for split in ("train", "test"):
        assert [r["extra_info"]["index"] for r in ds[split]] == list(range(ds[split].num_rows))
        assert {r["extra_info"]["split"] for r in ds[split]} == {split}
    by_id = {r["extra_info"]["id"]: r for r in rows}
    assert {r["agent_name"] for r in rows} == {"single_turn_agent"}
    task = by_id["t1"]
    assert task["reward_model"] == {"style": "rule", "ground_truth": "Ada"}
    assert task["extra_info"]["aliases"] == ["Ada L."] and task["agent_name"] == "single_turn_agent"
    assert task["data_source"] == "forgeplay/w/selfplay"
    # the split is deterministic and follows the id hash
    for row in rows:
        if row["extra_info"]["split"] == "test" and counts["test.parquet"] > 1:
            assert split_of(row["extra_info"]["id"], 0.2) == "test"
    assert export_verl("w", tmp_path / "again", root, test_fraction=0.2, tokenizer=embedded_tokenizer_dir).files == counts
    assert pq.read_table(tmp_path / "again" / "train.parquet").equals(pq.read_table(tmp_path / "train.parquet"))
    readme = (tmp_path / "README.md").read_text()
    assert f"data.max_prompt_length={r.lengths['max_prompt_length']}" in readme and r.lengths["rows"] == triples + 1
    assert f"reward.custom_reward_function.path={tmp_path.resolve()}/reward.py" in readme
    assert "--tool-agent" in readme and "multi_turn" not in readme


def test_trl_files_have_trl_types_and_load(root, tmp_path):
    counts = export_trl("w", tmp_path, root, kinds=("trajectories", "tasks"), test_fraction=0.0,
                        skip_rejected=False)
    grpo = pq.read_schema(tmp_path / "grpo_train.parquet")
    assert grpo.field("prompt").type == CHAT and grpo.field("answer").type == STR
    assert grpo.field("aliases").type == pa.list_(STR)
    assert pq.read_schema(tmp_path / "sft_train.parquet").field("messages").type == CHAT
    n_traj = load_table("w", "trajectories", root).num_rows
    assert counts["sft_train.parquet"] == n_traj and counts["sft_test.parquet"] == 0
    sft = datasets.load_dataset("parquet", data_files=str(tmp_path / "sft_train.parquet"))["train"]
    conv = sft[0]["messages"]
    assert conv[0]["role"] == "system" and conv[1]["role"] == "user" and conv[-1]["role"] == "assistant"
    assert "tool" in {m["role"] for m in conv} and any("<tool_call>" in m["content"] for m in conv)
    assert "<answer>" in conv[-1]["content"]
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "grpo_train.parquet"))["train"]
    assert ds.num_rows == counts["grpo_train.parquet"] > 0
    # the dataset columns reach the reward function the way TRL passes them
    batch = ds[:4]
    good = [[{"role": "assistant", "content": f"<think>ok</think><answer>{a}</answer>"}] for a in batch["answer"]]
    assert answer_reward(good, **{k: v for k, v in batch.items() if k != "prompt"}) == [1.0] * len(good)
    assert answer_reward(["no tags"] * len(good), batch["answer"], batch["aliases"]) == [0.0] * len(good)


def test_compute_score_loaded_by_file_path_as_verl_does():
    """The repository's own module (the export carries a copy: test_export_verl.py)."""
    path = Path(__file__).resolve().parents[2] / "train" / "reward.py"
    spec = importlib.util.spec_from_file_location("custom_module", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = getattr(mod, "compute_score")
    info = {"aliases": ["the 1887 edition", "eighteen eighty-seven"]}
    assert fn("forgeplay/w/bridge", "<think>hm</think>\n<answer>The 1887</answer>", "1887", info)["score"] == 1.0
    assert fn("d", "<answer>the 1887 Edition.</answer>", "1887", info)["score"] == 1.0  # via alias
    assert fn("d", "<answer>1888</answer>", "1887", info)["score"] == 0.0
    partial = fn("d", "<answer>Lake Tana north</answer>", "Lake Tana", None)
    assert partial["score"] == pytest.approx(0.5 * 0.8) and partial["format"] == 1.0
    for garbage in ["", "1887", "<answer>1887", "<answer>1887</answer><answer>1887</answer>", None, 42,
                    "<think><answer>1887</answer>"]:
        out = fn("d", garbage, "1887", info)
        assert out["score"] == 0.0 and out["format"] == 0.0, garbage
    assert fn("d", "<answer>Ada L.</answer>", json.dumps({"answer": "Ada", "aliases": ["Ada L."]}))["score"] == 1.0
    assert fn("d", "<answer>x</answer>", "1887", {"aliases": None})["score"] == 0.0


def test_cli_export(root, tmp_path, embedded_tokenizer_dir):
    import typer

    from flows.cli_export import register

    app = typer.Typer()
    register(app)

    @app.callback()
    def _():  # keep `export` a subcommand
        pass

    runner = CliRunner()
    out = tmp_path / "verl"
    res = runner.invoke(app, ["export", "verl", "--dataset", "w", "--out", str(out), "--data-root", str(root),
                              "--kinds", "tasks", "--kinds", "triples", "--tokenizer", str(embedded_tokenizer_dir)])
    assert res.exit_code == 0, res.output
    assert "set data.max_prompt_length=" in res.output
    assert (out / "train.parquet").exists() and (out / "README.md").exists()
    abilities = set(pq.read_table(out / "train.parquet").column("ability").to_pylist())
    assert abilities == {"multihop_qa"}
    res = runner.invoke(app, ["export", "trl", "--dataset", "nope", "--out", str(tmp_path / "t"), "--data-root", str(root)])
    assert res.exit_code == 2 and "no dataset" in res.output
    res = runner.invoke(app, ["export", "trl", "--dataset", "w", "--out", str(tmp_path / "t"), "--data-root", str(root),
                              "--kinds", "bogus"])
    assert res.exit_code == 2 and "unknown kind" in res.output
    res = runner.invoke(app, ["export", "verl", "--dataset", "w", "--out", str(out), "--data-root", str(root),
                              "--tool-agent", "--tokenizer", str(tmp_path)])
    assert res.exit_code == 2 and "cannot load a tokenizer from" in res.output

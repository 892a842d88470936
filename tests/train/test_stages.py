"""The stage registry (train/stages.py) and the one entry point (train/run.py): a toy kind,
registered in a few lines and no CLI code, becomes `forgeplay train toy` (through the Prefect
flow) and `python -m train toy`, trains the tiny random Llama, writes what every kind writes
(config.json, metrics, checkpoint, curves, final model) and reports its stages."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch
import typer
from typer.testing import CliRunner

from tests.train.test_rollout import world  # noqa: F401 (module fixture: a small world dataset)
from train.stages import TRAINING_KINDS, Built, StageKind, add_stage_commands, get_kind, load_model
from train.trainer import read_metrics


# ---- the toy kind: a config, a step function, a build and one registry entry -----------------

@dataclass
class ToyConfig:
    """A run name, the model folder, the run folder and how many random sequences to fit."""

    data: str = ""
    model: str | None = None
    out: str = ""
    n: int = 6


def toy_step(model, batch: list) -> tuple[torch.Tensor, dict]:
    ids = torch.stack(batch)
    return model(input_ids=ids, labels=ids).loss, {"tokens": ids.numel()}


def build_toy(cfg: ToyConfig, tcfg, root, device) -> Built:
    _, tok, model = load_model(cfg.model, device)
    data = [torch.randint(5, 200, (8,), generator=torch.Generator().manual_seed(i)) for i in range(cfg.n)]
    return Built(model, tok, toy_step, data, loss_weight=None, counts={"sequences": cfg.n})


TOY = StageKind("toy", ToyConfig, build_toy, help="Fit random token sequences (a test kind).")

# -----------------------------------------------------------------------------------------------


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(TRAINING_KINDS, "toy", TOY)
    return TOY


def test_a_registered_kind_trains_through_the_forgeplay_command_and_flow(toy, tiny_llama_dir, tmp_path):
    from flows.cli_train import register

    app = typer.Typer()
    register(app)  # the commands are generated from the registry, toy included
    out = tmp_path / "toy"
    args = ["train", "toy", "--data", "t", "--model", str(tiny_llama_dir), "--out", str(out), "--n", "5",
            "--max-steps", "2", "--batch-size", "2", "--lr", "1e-3", "--data-root", str(tmp_path), "--keep-checkpoints"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "2 steps" in res.output and "sequences" in res.output
    assert [r["step"] for r in read_metrics(out)] == [1, 2]
    assert all(len(r["batch"]) == 2 and r["tokens"] == 16 for r in read_metrics(out))
    config = json.loads((out / "config.json").read_text())
    assert config["toy"]["n"] == 5 and config["train"]["max_steps"] == 2
    assert (out / "final" / "config.json").exists() and (out / "curves.png").exists()
    assert (out / "checkpoints" / "latest").read_text() == "step-00000002"


def test_run_stage_reports_stages_and_resumes(toy, tiny_llama_dir, tmp_path):
    from train.configs import TrainConfig
    from train.run import run_stage

    cfg = ToyConfig(data="t", model=str(tiny_llama_dir), out=str(tmp_path / "run"), n=4)
    s1 = run_stage("toy", cfg, TrainConfig(max_steps=1, batch_size=2, keep_checkpoints=True), tmp_path, progress=False)
    assert [(r["stage"], r["rows_out"]) for r in s1["stages"]] == [("load", 4), ("train", 1)]
    assert s1["steps"] == 1 and s1["counts"] == {"sequences": 4} and s1["final_model"].endswith("final")
    s2 = run_stage("toy", cfg, TrainConfig(max_steps=3, batch_size=2, resume=True), tmp_path, progress=False)
    assert s2["stages"][1]["rows_out"] == 2  # steps 2 and 3 only: it continued after step 1
    assert [r["step"] for r in read_metrics(cfg.out)] == [1, 2, 3] and s2["first"]["step"] == 1
    # the data position was restored: no example repeats before the epoch of 4 is used up
    assert sorted(i for r in read_metrics(cfg.out)[:2] for i in r["batch"]) == [0, 1, 2, 3]


def test_python_m_train_lists_every_kind_and_checks_input(toy, tmp_path):
    from train.__main__ import _run

    app = typer.Typer()
    add_stage_commands(app, _run)
    res = CliRunner().invoke(app, ["--help"])
    assert res.exit_code == 0 and all(k in res.output for k in ("sft", "grpo", "toy")), res.output
    res = CliRunner().invoke(app, ["toy", "--n", "3"])
    assert res.exit_code == 2 and "train toy failed" in res.output and "--data and --out are required" in res.output
    with pytest.raises(ValueError, match="unknown training stage 'nope'; known: sft, grpo, (.*, )?toy"):
        get_kind("nope")


def test_grpo_kind_runs_in_process_with_hop_grouped_advantages(world, tiny_llama_dir, tmp_path):  # noqa: F811
    """The built-in grpo kind end to end (one step, sampled by the tiny model): the triples'
    hop counts reach the objective that `--advantage hop-grouped` picks."""
    from train.configs import GRPOConfig, TrainConfig
    from train.run import run_stage

    root = world[0]
    cfg = GRPOConfig(data="w", model=str(tiny_llama_dir), out=str(tmp_path / "g"), limit=2, group_size=2,
                     max_turns=1, max_new_tokens=4, tool_style="compact", advantage="hop-grouped")
    s = run_stage("grpo", cfg, TrainConfig(max_steps=1, batch_size=2, checkpoint_every=0), root, progress=False)
    assert s["steps"] == 1 and s["counts"]["prompts"] == 2 and s["last"]["tokens"] > 0
    assert s["counts"]["trainable_params"] == s["counts"]["params"]  # --train-layers 0: every parameter
    assert {"reward", "pg_loss", "clip_frac"} <= set(s["last"]) and "kl" not in s["last"]  # kl_coef 0: no KL term
    assert json.loads((tmp_path / "g" / "config.json").read_text())["grpo"]["advantage"] == "hop-grouped"


def test_grpo_with_train_layers_trains_only_the_last_blocks(world, tiny_llama_dir, tmp_path):  # noqa: F811
    """`train grpo --train-layers 1`: only the last block and the final norm take gradients
    (the optimizer takes only those), as SFT's option does."""
    from train.configs import GRPOConfig, TrainConfig
    from train.stages import build_grpo

    cfg = GRPOConfig(data="w", model=str(tiny_llama_dir), out=str(tmp_path / "g"), limit=2, group_size=2,
                     max_turns=1, max_new_tokens=4, tool_style="compact", train_layers=1)
    built = build_grpo(cfg, TrainConfig(max_steps=1, batch_size=2), world[0], device="cpu")
    trainable = {k for k, p in built.model.named_parameters() if p.requires_grad}
    assert trainable and all(k.startswith("model.layers.1.") or k == "model.norm.weight" for k in trainable), trainable
    assert "model.norm.weight" in trainable
    assert 0 < built.counts["trainable_params"] < built.counts["params"]


def test_grpo_carries_the_sft_models_longest_turn_and_warns_when_rollouts_would_cut_it(world, tiny_llama_dir,  # noqa: F811
                                                                                       tmp_path, capsys):
    """GRPO from a model `train sft` saved (its forgeplay-model.json records the longest trained
    turn): rollouts of fewer `--max-new-tokens` are warned about on stderr, in the load stage's
    notes and in the summary's warnings, and GRPO's own final model keeps the record, so `train
    eval` on it still warns; a model without a record gives no warning and no record."""
    import shutil

    from generators.llm.model_store import MARKER
    from train.configs import GRPOConfig, TrainConfig
    from train.run import run_stage
    from train.sft import trained_turn

    sft = tmp_path / "sft-final"
    shutil.copytree(tiny_llama_dir, sft)
    (sft / MARKER).write_text(json.dumps({"trained_from": str(tiny_llama_dir), "longest_turn": 7}))
    for model, warned in ((sft, True), (tiny_llama_dir, False)):
        out = tmp_path / f"g-{warned}"
        cfg = GRPOConfig(data="w", model=str(model), out=str(out), limit=2, group_size=2, max_turns=1,
                         max_new_tokens=4, tool_style="compact")
        order = "kinds" if warned else "shuffle"  # GRPO's questions have kinds too
        s = run_stage("grpo", cfg, TrainConfig(max_steps=1, batch_size=2, checkpoint_every=0, order=order), world[0],
                      progress=False)
        said = "up to 7 tokens, more than --max-new-tokens 4"
        assert (said in capsys.readouterr().err) == warned
        assert (said in next(x for x in s["stages"] if x["stage"] == "load")["notes"]) == warned
        assert len(s["warnings"]) == warned and all(said in w for w in s["warnings"])  # the loop's notes take these
        assert trained_turn(out / "final") == (7 if warned else None) == s["counts"].get("longest_turn")


def test_grpo_in_two_processes_reports_rank_zeros_warning(world, tiny_llama_dir, tmp_path):  # noqa: F811
    """`--nproc 2`: the ranks build and rank 0 records the build's warnings in config.json, so the
    launcher's summary (what the loop's notes take) has them too."""
    import shutil

    from generators.llm.model_store import MARKER
    from train.configs import GRPOConfig, TrainConfig
    from train.run import run_stage

    sft = tmp_path / "sft-final"
    shutil.copytree(tiny_llama_dir, sft)
    (sft / MARKER).write_text(json.dumps({"trained_from": str(tiny_llama_dir), "longest_turn": 7}))
    out = tmp_path / "g2"
    cfg = GRPOConfig(data="w", model=str(sft), out=str(out), limit=2, group_size=2, max_turns=1, max_new_tokens=4,
                     tool_style="compact")
    s = run_stage("grpo", cfg, TrainConfig(max_steps=1, batch_size=1, checkpoint_every=0, nproc=2), world[0],
                  progress=False)
    assert s["steps"] == 1 and len(s["warnings"]) == 1
    assert "up to 7 tokens, more than --max-new-tokens 4" in s["warnings"][0]
    assert json.loads((out / "config.json").read_text())["warnings"] == s["warnings"]

"""forgeplay's objectives inside verl (train/verl_objective.py) and `train grpo --engine verl`
(train/verl_launch.py): the dry run writes the export, overrides.txt and run.sh; and (marker
`verl`) in .venv-verl, without forgeplay, verl's compute_advantage with the registered estimators
gives forgeplay's own advantages on the same groups and labels (label-aware GRPO after the
Labeller bought labels, HRPO), verl's reward loader forgeplay's reward, and verl's config loader
composes the dry run's overrides."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
import typer
from typer.testing import CliRunner

from acquire.training import Labeller, advantage_weights, bought_labels
from generators.corpus.build import WorldConfig, write
from storage import load_table
from train.configs import GRPOConfig
from train.objective import RolloutBatch, grpo_objective
from train.reward import compute_score, score_answer
from train.rollout import Prompt, Rollout
from train.verl_bundle import OBJECTIVE_MODULE

SIDE = Path(__file__).with_name("verl_objective_side.py")
G, FORMAT = 4, 0.1
VOTE_WEIGHTS = (0.0, 0.6)


def _app() -> typer.Typer:
    from flows.cli_train import register

    app = typer.Typer()
    register(app)

    @app.callback()
    def _():  # keep `train` a subcommand
        pass

    return app


def _responses(t: dict, i: int) -> list[str]:
    """A group whose vote is right (even i) or wrong (odd i), with partial credit and garbage."""
    gold, wrong = t["answer"], f"Place {i}"
    if i % 2:
        return [f"<answer>{wrong}</answer>", f"<think>so</think><answer>{wrong}</answer>",
                f"<answer>{gold}</answer>", f"<answer>{gold} and {wrong}</answer>"]
    return [f"<answer>{gold}</answer>", f"<answer>{gold}</answer>", f"<answer>{wrong}</answer>", "no answer here"]


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """A world; label-aware GRPO's Labeller run on 4 prompts x 4 rollouts (buys 2 labels)."""
    root = tmp_path_factory.mktemp("data")
    write(WorldConfig(seed=3, entities=120), root, "w")
    triples = load_table("w", "triples", root).to_pylist()[:4]
    cfg = GRPOConfig(data="w", labels="random", budget=2.0, label_p=0.5, group_size=G, format_weight=FORMAT)
    prompts = [Prompt([{"role": "user", "content": t["question"]}], t["answer"], list(t["aliases"] or []),
                      key=t["triple_id"], meta={"hop_count": t["hop_count"]}) for t in triples]
    texts = [_responses(t, i) for i, t in enumerate(triples)]
    group = [p for p in prompts for _ in range(G)]
    rollouts = []
    for p, text in zip(group, (x for xs in texts for x in xs)):
        parts = score_answer(text, p.answer, p.aliases)
        rollouts.append(Rollout(p.messages + [{"role": "assistant", "content": text}], [0], [1], [], 0.0,
                                {"em": parts["em"], "format": parts["format"]}))
    out_prompts, rewards, stats = Labeller(cfg, root, None, prompts)(group, rollouts, 0)
    return root, cfg, triples, texts, out_prompts, rewards, stats


def _advantages(cfg, prompts, rewards) -> list[float]:
    """forgeplay's GRPO objective's advantages (train/objective.py) for the batch."""
    batch = RolloutBatch(prompts, [[0]] * len(prompts), torch.ones(len(prompts), 1), torch.tensor(rewards), G, 0,
                         lambda m: None)
    return grpo_objective(cfg, None).advantages(batch).tolist()


def _dry_run(root, cfg, out: Path, model) -> CliRunner:
    return CliRunner().invoke(_app(), ["train", "grpo", "--dataset", "w", "--out", str(out), "--engine", "verl",
                                       "--dry-run", "--labels", cfg.labels, "--group-size", str(G), "--model", str(model),
                                       "--format-weight", str(FORMAT), "--data-root", str(root)])


def test_dry_run_writes_the_verl_run_and_bad_options_stop_in_one_line(labelled, tiny_llama_dir, tmp_path):
    root, cfg, triples, *_ = labelled
    res = _dry_run(root, cfg, tmp_path / "run", tiny_llama_dir)
    assert res.exit_code == 0, res.output
    folder = (tmp_path / "run" / "verl").resolve()
    overrides = (folder / "overrides.txt").read_text().splitlines()
    assert "algorithm.adv_estimator=forgeplay_labels" in overrides and "trainer.v1.trainer_mode=forgeplay" in overrides
    assert f"actor_rollout_ref.rollout.n={G}" in overrides and f"data.train_files={folder}/train.parquet" in overrides
    assert f"VERL_USE_EXTERNAL_MODULES={OBJECTIVE_MODULE}" in res.output and "verl.trainer.main_ppo" in res.output
    assert (folder / "forgeplay_verl" / "train" / "verl_objective.py").exists() and (folder / "run.sh").exists()
    readme = " ".join((folder / "README.md").read_text().split())
    assert "algorithm.adv_estimator=forgeplay_labels" in readme and "trainer.v1.trainer_mode=forgeplay" in readme
    assert "no hook to give the teacher a prompt of its own" in readme  # what verl cannot express, said
    import pyarrow.parquet as pq

    rows = {r["extra_info"]["id"]: r["extra_info"] for part in ("train", "test")
            for r in pq.read_table(folder / f"{part}.parquet").to_pylist()}
    bought = bought_labels(root, cfg)
    assert len(bought) == 2 and {i for i, e in rows.items() if e["label"]} == set(bought)
    assert all(rows[i]["label"] == label and rows[i]["format_weight"] == FORMAT for i, label in bought.items())
    for args, error in ((["--engine", "verl"], "needs verl in this Python"), (["--dry-run"], "needs --engine verl"),
                        (["--engine", "deepspeed"], "--engine must be one of trainer, verl")):
        out = tmp_path / "no"
        res = CliRunner().invoke(_app(), ["train", "grpo", "--dataset", "w", "--out", str(out), *args,
                                          "--data-root", str(root)])
        assert res.exit_code == 2 and error in res.output and not out.exists(), res.output


@pytest.mark.verl
def test_verl_computes_forgeplays_advantages_and_reward(labelled, tiny_llama_dir, embedded_tokenizer_dir,
                                                        verl_python, tmp_path):
    root, cfg, triples, texts, out_prompts, rewards, stats = labelled
    assert stats["labels_bought"] == 2.0
    res = _dry_run(root, cfg, tmp_path / "run", tiny_llama_dir)
    assert res.exit_code == 0, res.output
    folder = tmp_path / "run" / "verl"
    cases = {"groups": [{"id": t["triple_id"], "responses": r} for t, r in zip(triples, texts)],
             "vote_weights": list(VOTE_WEIGHTS), "overrides": (folder / "overrides.txt").read_text().splitlines()}
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run = subprocess.run([str(verl_python), str(SIDE), str(folder), str(embedded_tokenizer_dir), str(tmp_path / "cases.json")],
                         cwd=tmp_path, env={**env, "PYTHONPATH": str(folder), "VERL_USE_EXTERNAL_MODULES": OBJECTIVE_MODULE},
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["verl"] == "0.9.1" and got["forgeplay_importable"] == [] and got["registered"] == ["forgeplay_hrpo", "forgeplay_labels"]
    infos = got["extra_info"]
    # the reward: verl's loader on the exported reward.py gives forgeplay's reward
    assert got["scores"] == [compute_score("d", x, t["answer"], info) for t, xs, info in zip(triples, texts, infos)
                             for x in xs]
    # HRPO: forgeplay's GRPO with --advantage hop-grouped, rewards as its rollouts score them
    hop_cfg = GRPOConfig(data="w", advantage="hop-grouped", group_size=G)
    scored = [s["score"] + (FORMAT if s["format"] == 1.0 else 0.0)
              for t, xs in zip(triples, texts) for s in (score_answer(x, t["answer"], t["aliases"] or []) for x in xs)]
    diffs = {"hrpo": max(abs(a - b) for a, b in zip(got["hrpo"], _advantages(hop_cfg, out_prompts, scored)))}
    assert len({i["hop_count"] for i in infos}) > 1 and any(abs(a) > 0.1 for a in got["hrpo"])
    # label-aware GRPO: the Labeller's rewards and CARE weights (bought 1, a voted prompt w) in forgeplay's objective
    known = set(bought_labels(root, cfg))
    for w in VOTE_WEIGHTS:
        ids = [t["triple_id"] for t in triples]
        weights = advantage_weights(ids, known, {i: w / cfg.soft_adv for i in ids if i not in known}, cfg.soft_adv)
        prompts = [type(p)(**{**p.__dict__, "meta": {**p.meta, "weight": weights[k // G]}})
                   for k, p in enumerate(out_prompts)]
        if w == 0.0:
            assert [p.meta["weight"] for p in prompts] == [p.meta["weight"] for p in out_prompts]  # the Labeller's own
        expected = _advantages(cfg, prompts, rewards)
        diffs[f"labels w={w}"] = max(abs(a - b) for a, b in zip(got["labels"][str(w)], expected))
        moved = {ids[k // G] for k, a in enumerate(expected) if abs(a) > 1e-6}
        assert moved == known if w == 0 else moved > known  # the bought groups, and the voted ones when w > 0
    print("max |verl - forgeplay| advantage:", diffs)
    assert all(d < 1e-6 for d in diffs.values()), diffs
    assert "trainer.v1.trainer_mode=forgeplay" in got["without_columns"]  # verl alone hands no columns: one line
    config = got["config"]  # verl's config loader composes the dry run's overrides
    assert config["algorithm.adv_estimator"] == "forgeplay_labels" and config["trainer.v1.trainer_mode"] == "forgeplay"
    assert config["actor_rollout_ref.rollout.n"] == G and config["reward.custom_reward_function.path"].endswith("reward.py")
    assert config["ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES"] == OBJECTIVE_MODULE

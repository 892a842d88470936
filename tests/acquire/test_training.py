"""Label-aware GRPO (acquire/training.py through train/labelled.py): the labeller buys within
the budget from the held-back answers, reuses a label paid before for free, rewards each
rollout against its prompt's label and weights the prompts as CARE's code does; end to end,
`train grpo --labels care` trains the tiny random Llama, keeps ledger and labels shard in
agreement and checkpoints the probes with the policy."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from acquire.ledger import Ledger
from acquire.training import Labeller, advantage_weights
from generators.corpus.build import WorldConfig, write
from storage import load_table
from storage.manifest import dataset_dir
from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401
from train.configs import GRPOConfig, TrainConfig
from train.rollout import Prompt, Rollout


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("labelled")
    write(WorldConfig(seed=3, entities=120), root, "w")
    return root


def test_advantage_weights_follow_care():
    gated = {"g1": 0.3, "g2": math.sqrt(8), "g3": 0.0}
    assert advantage_weights(["k", "g1", "g2", "g3", "o"], {"k"}, gated, 1.0) == [1.0, 0.3, 1.0, 0.0, 0.0]
    assert advantage_weights(["g1", "g2"], set(), gated, 2.0) == [0.6, 1.0]
    assert advantage_weights(["g1"], {"g1"}, gated, 1.0) == [1.0]  # a known label wins


def _rollout(answer: str | None, true: str) -> Rollout:
    text = f"<think>t</think><answer>{answer}</answer>" if answer else "no answer"
    return Rollout([{"role": "user", "content": "q"}, {"role": "assistant", "content": text}], [], [], [], 0.0,
                   {"em": float(answer == true), "format": float(answer is not None)})


def test_labeller_buys_within_the_budget_and_reuses_paid_labels(root):
    truth = {"pa": "Rome", "pb": "Oslo", "pc": "Lima", "pd": "Kiev"}
    answers = {"pa": ["Paris", "Paris", "Rome"], "pb": ["Oslo", "Oslo", "Oslo"], "pc": ["Lima", "Bern", "Bern"],
               "pd": [None, None, "Kiev"]}
    prompts = [Prompt([], truth[k], [], [], k, {"hop_count": 2}) for k in answers for _ in range(3)]
    rollouts = [_rollout(a, truth[k]) for k in answers for a in answers[k]]
    cfg = GRPOConfig(data="w", labels="random", budget=2, label_p=0.5, group_size=3, format_weight=0.1,
                     labels_out="w_unit")
    lab = Labeller(cfg, root, model=None, prompts=prompts)
    out, rewards, stats = lab(prompts, rollouts, step=0)
    weights = {p.key: p.meta["weight"] for p in out}
    bought = {k for k, w in weights.items() if w == 1.0}
    assert len(bought) == 2 and set(weights.values()) == {0.0, 1.0} and out[0].meta["hop_count"] == 2
    assert stats["labels_bought"] == 2 and stats["budget_left"] == 0 and stats["vote_right"] == 0.5  # pb and pd
    for i, p in enumerate(out):  # against the true label when bought, else against the vote: 0/1
        a = answers[p.key][i % 3]
        label = truth[p.key] if p.key in bought else max(set(answers[p.key]) - {None}, key=answers[p.key].count)
        assert rewards[i] == float(a == label), (p.key, a)
    labels = load_table("w_unit", "labels", root).to_pylist()
    assert {r["prompt_id"]: r["label"] for r in labels if r["source"] == "column"} == {k: truth[k] for k in bought}
    assert {r["prompt_id"] for r in labels if r["source"] == "pseudo"} == bought  # the vote each label replaced

    again = Labeller(cfg, root, model=None, prompts=prompts)  # a later run on the same labels dataset: paid labels are free
    out2, _, stats2 = again(prompts, rollouts, step=1)
    assert stats2["labels_known"] == 2 and stats2["labels_bought"] == 0
    assert {p.key for p in out2 if p.meta["weight"] == 1.0} == bought
    assert Ledger(dataset_dir(root, "w_unit") / "_ledger.sqlite").summary()["spent"] == 2

    partial = GRPOConfig(data="w", labels="random", budget=2, label_p=0.5, group_size=3, format_weight=0.1,
                         labels_out="w_unit", label_reward="partial")  # the same paid labels, partial credit
    out3, rewards3, _ = Labeller(partial, root, model=None, prompts=prompts)(prompts, rollouts, step=2)
    for i, p in enumerate(out3):
        a = answers[p.key][i % 3]
        label = truth[p.key] if p.key in bought else max(set(answers[p.key]) - {None}, key=answers[p.key].count)
        assert rewards3[i] == pytest.approx(float(a == label) + (0.1 if a else 0.0)), (p.key, a)  # no near misses here


def test_label_aware_grpo_buys_from_any_label_source(root, monkeypatch):
    """GRPO shares acquisition's LabelConfig: `--source llm` asks the annotator model over real
    HTTP for the prompts it buys (answers only, the rest released), `--source queue` writes them
    to a file for people and trains on the votes meanwhile, and a toy source, one class plus one
    registry entry, is offered and used by both commands."""
    from acquire.sources import SOURCES, ColumnSource
    from flows.cli import app
    from generators.llm.server import create_app
    from tests.acquire.test_sources import Annotator
    from tests.generators.servers import UvicornThread

    truth = {f"q{i}": f"City {i}" for i in range(4)}
    prompts = [Prompt([{"role": "user", "content": f"Which city is number {i}?"}], truth[k], [], [], k, {})
               for i, k in enumerate(truth) for _ in range(2)]
    rollouts = [_rollout(a, truth[p.key]) for p, a in zip(prompts, ["x", "y"] * 4)]
    annotator = Annotator({f"Which city is number {i}?": truth[k] for i, k in enumerate(truth)})
    with UvicornThread(create_app(annotator, model_name="annotator", batch_wait=0)) as srv:
        cfg = GRPOConfig(data="w", labels="random", budget=4, label_p=1.0, group_size=2, labels_out="w_llm",
                         source="llm", annotator_url=srv.url, label_cost=0.5)
        _, _, stats = Labeller(cfg, root, model=None, prompts=prompts)(prompts, rollouts, step=0)
    rows = load_table("w_llm", "labels", root).to_pylist()
    bought = {r["prompt_id"]: r["label"] for r in rows if r["source"] == "llm"}
    assert bought and len(bought) == stats["labels_bought"] == len(annotator.answered) < 4
    assert all(truth[k] == v for k, v in bought.items())
    assert Ledger(dataset_dir(root, "w_llm") / "_ledger.sqlite").summary()["spent"] == 0.5 * len(bought)

    cfg = GRPOConfig(data="w", labels="random", budget=4, label_p=1.0, group_size=2, labels_out="w_queue",
                     source="queue")
    _, _, stats = Labeller(cfg, root, model=None, prompts=prompts)(prompts, rollouts, step=0)
    queued = list((dataset_dir(root, "w_queue") / "_queue").glob("random-*.csv"))
    assert stats["labels_bought"] == 0 and len(queued) == 1 and len(queued[0].read_text().splitlines()) == 5

    class Oracle(ColumnSource):  # the toy source: the held-back answers, at a tenth of the price
        name = "oracle"

        @classmethod
        def from_config(cls, cfg, root, prompts, ledger):
            return cls({p.prompt_id: p.answer for p in prompts}, cfg.label_cost / 10)

    monkeypatch.setitem(SOURCES, "oracle", Oracle)
    cfg = GRPOConfig(data="w", labels="random", budget=0.4, label_p=1.0, group_size=2, labels_out="w_oracle",
                     source="oracle")
    cfg.check_labelling()
    _, _, stats = Labeller(cfg, root, model=None, prompts=prompts)(prompts, rollouts, step=0)
    assert stats["labels_bought"] == 4  # four labels for 0.4
    for args in (["train", "grpo"], ["acquire-labels"]):
        out = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "300"}).output
        assert "column, queue, llm, oracle" in out, out


def test_train_grpo_with_care_labels_checkpoints_the_probes(root, tiny_llama_dir, tmp_path):  # noqa: F811
    from flows.train import run

    cfg = GRPOConfig(data="w", model=str(tiny_llama_dir), out=str(tmp_path / "g"), limit=6, group_size=2,
                     max_turns=1, max_new_tokens=4, tool_style="compact", labels="care", budget=3, label_p=0.5,
                     label_gate=0.5, label_warmup=1, labels_out="w_care")
    tcfg = TrainConfig(max_steps=2, batch_size=2, checkpoint_every=1, schedule="constant", keep_checkpoints=True)
    s = run("grpo", cfg, tcfg, root)
    recs = [json.loads(x) for x in (tmp_path / "g" / "metrics.jsonl").read_text().splitlines()]
    assert len(recs) == 2 and all({"labels_bought", "label_weight", "reward_noise", "budget_left"} <= set(r) for r in recs)
    assert s["last"]["budget_left"] == 3 - sum(r["labels_bought"] for r in recs) >= 0
    ledger = Ledger(dataset_dir(root, "w_care") / "_ledger.sqlite")
    bought = [r for r in load_table("w_care", "labels", root).to_pylist() if r["source"] == "column"]
    assert ledger.paid() == {r["prompt_id"]: r["label"] for r in bought} and len(bought) == ledger.summary()["labels"]
    saved = torch.load(tmp_path / "g" / "checkpoints" / "step-00000002" / "extra-labeller.pt", weights_only=False)
    assert saved["probes"]["updates"] == sum("probe_loss" in r for r in recs) > 0  # one label alone waits for a second

    resumed = run("grpo", cfg, TrainConfig(max_steps=3, batch_size=2, checkpoint_every=1, schedule="constant",
                                           resume=True, keep_checkpoints=True), root)
    assert resumed["steps"] == 3
    after = torch.load(tmp_path / "g" / "checkpoints" / "step-00000003" / "extra-labeller.pt", weights_only=False)
    assert after["probes"]["updates"] >= saved["probes"]["updates"]  # restored, not started over
    assert len(after["probes"]["buffer"]) >= len(saved["probes"]["buffer"])
    assert ledger.summary()["spent"] <= 3


def test_labels_options_are_checked_before_training(root):
    from flows.cli import app

    base = ["train", "grpo", "--dataset", "w", "--out", "x", "--data-root", str(root)]
    res = CliRunner().invoke(app, base + ["--labels", "nope"])
    assert res.exit_code == 2 and "--labels must be one of random" in res.output, res.output
    res = CliRunner().invoke(app, base + ["--labels", "care", "--label-reward", "half"])
    assert res.exit_code == 2 and "--label-reward must be binary or partial" in res.output, res.output


# `python -m train` in a fresh process; writes its exit code and the flows modules it imported
RUN = """
import json, sys
import train.__main__ as m
out, sys.argv = sys.argv[1], ["train", *json.loads(sys.argv[2])]
code = 0
try:
    m.app()
except SystemExit as e:
    code = e.code
open(out, "w").write(json.dumps({"code": code, "flows": sorted(k for k in sys.modules if k.split(".")[0] == "flows")}))
"""


def test_python_m_train_runs_label_aware_grpo_without_flows(root, tiny_llama_dir, tmp_path):  # noqa: F811
    """The labellers and the self-play stages come from train/plugins.py (pyproject's entry points),
    not from an import in flows: `python -m train grpo --labels care` lists and runs them alone."""
    repo, out = Path(__file__).resolve().parents[2], tmp_path / "got.json"
    env = {**os.environ, "PYTHONPATH": str(repo)}
    args = ["grpo", "--dataset", "w", "--model", str(tiny_llama_dir), "--out", str(tmp_path / "g"), "--limit", "4",
            "--group-size", "2", "--max-turns", "1", "--max-new-tokens", "4", "--tool-style", "compact",
            "--labels", "care", "--budget", "2", "--out-dataset", "w_cli", "--max-steps", "1", "--batch-size", "2",
            "--data-root", str(root)]
    subprocess.run([sys.executable, "-c", RUN, str(out), json.dumps(args)], cwd=repo, env=env, check=True, timeout=600)
    got = json.loads(out.read_text())
    assert got == {"code": 0, "flows": []}
    rec = json.loads((tmp_path / "g" / "metrics.jsonl").read_text().splitlines()[0])
    assert "labels_bought" in rec and rec["budget_left"] >= 0
    help_text = subprocess.run([sys.executable, "-m", "train", "--help"], cwd=repo, env={**env, "COLUMNS": "200"},
                               capture_output=True, text=True, check=True).stdout
    assert "selfplay-examiner" in help_text and "selfplay-student" in help_text



def test_label_aware_grpo_in_two_processes_sharded_equals_unsharded(root, tiny_llama_dir, tmp_path):  # noqa: F811
    """`train grpo --labels care --nproc 2` (torchrun, gloo): rank 0 buys for both ranks' prompts
    within one budget, every label once; with `--shard full` the labeller reads the policy's hidden
    states with whole weights (train/shard.py `gathered`), and the same labels are bought, with the
    same rewards, weights and losses as `--shard none`; the probes ride in the sharded checkpoint."""
    from transformers import AutoModelForCausalLM

    from flows.cli import app

    finals, recs = {}, {}
    for shard in ("none", "full"):
        out = tmp_path / shard
        res = CliRunner().invoke(app, [
            "train", "grpo", "--dataset", "w", "--model", str(tiny_llama_dir), "--out", str(out), "--limit", "8",
            "--group-size", "2", "--max-turns", "1", "--max-new-tokens", "4", "--tool-style", "compact",
            "--labels", "care", "--budget", "3", "--label-p", "0.5", "--label-gate", "0.5", "--label-warmup", "1",
            "--out-dataset", f"w_care_{shard}", "--data-root", str(root), "--nproc", "2", "--batch-size", "2",
            "--max-steps", "2", "--schedule", "constant", "--lr", "1e-3", "--shard", shard, "--keep-checkpoints"])
        assert res.exit_code == 0, res.output
        recs[shard] = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        finals[shard] = AutoModelForCausalLM.from_pretrained(out / "final").state_dict()
        ledger = Ledger(dataset_dir(root, f"w_care_{shard}") / "_ledger.sqlite")
        bought = [r for r in load_table(f"w_care_{shard}", "labels", root).to_pylist() if r["source"] == "column"]
        assert ledger.paid() == {r["prompt_id"]: r["label"] for r in bought}  # each label bought once
        assert len(bought) == sum(r["labels_bought"] for r in recs[shard]) == 3 - recs[shard][-1]["budget_left"]
    assert sum(r["labels_bought"] for r in recs["none"]) > 0
    for key in ("batch", "reward", "labels_bought", "label_weight", "budget_left"):
        assert [r[key] for r in recs["full"]] == [r[key] for r in recs["none"]], key
    assert [r["loss"] for r in recs["full"]] == pytest.approx([r["loss"] for r in recs["none"]], rel=1e-5, abs=1e-7)
    diff = max(float((finals["full"][k] - v).abs().max()) for k, v in finals["none"].items())
    assert diff < 1e-6, diff
    print("label-aware GRPO (care) in 2 processes, --shard full vs none: labels bought",
          [r["labels_bought"] for r in recs["full"]], "max abs weight diff", diff)
    ck = tmp_path / "full" / "checkpoints" / "step-00000002"
    assert (ck / "sharded").is_dir()
    assert torch.load(ck / "extra-labeller.pt", weights_only=False)["probes"]["updates"] > 0

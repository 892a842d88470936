"""Data-parallel training (train/dist.py, gloo on CPU, tiny random Llama): 2 processes with
batch B give the same losses and weights as 1 process with batch 2B (and as 1 process with
batch B and 2 accumulation steps, and as 2 processes packing their examples into token-budget
micro-batches) on examples of different lengths, because the loss is normalised by the global
count of labelled tokens; and `forgeplay train sft --nproc 2`
runs end to end, resumes, and reports a failing rank in one readable line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
import typer
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from storage.configcli import config_command, to_args
from storage import write_rows
from tests.train.test_sft import traj_root  # noqa: F401 (fixture: synthesized trajectories)
from train import checkpoint, dist
from train.configs import SFTConfig, TrainConfig
from train.packing import use_packed_attention
from train.sft import IGNORE, collate, make_step, sft_loss
from train.stages import SFT_LOSS_WEIGHT
from train.trainer import Trainer, read_metrics

CFG = dict(max_steps=3, lr=1e-3, schedule="constant", checkpoint_every=0, seed=4)


def sft_examples(n: int = 12) -> list[dict]:
    """Examples of different lengths whose labelled spans differ a lot in size."""
    g = torch.Generator().manual_seed(3)
    out = []
    for i in range(n):
        length = 6 + 5 * (i % 4) + i
        ids = torch.randint(5, 500, (length,), generator=g).tolist()
        trained = 1 + (i * 7) % (length - 2)  # the last `trained` tokens are labelled
        out.append({"input_ids": ids, "labels": [IGNORE] * (length - trained) + ids[length - trained:]})
    return out


def _train(model_dir, run_dir, cfg: dict, packed: bool = False) -> tuple[Trainer, dict]:
    """Train on sft_examples() (`packed`: micro-batches of at most 30 tokens, one packed row
    each); returns the trainer and the synced gradients of step 1."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if packed:
        use_packed_attention(model)
        cfg = {**cfg, "max_batch_tokens": 30}
    grads: dict = {}

    def keep_first_grads(rec: dict) -> None:
        if rec["step"] == 1:
            grads.update({n: p.grad.clone() for n, p in model.named_parameters()})

    data = sft_examples()
    t = Trainer(model, TrainConfig(**cfg), run_dir, make_step(0, packed), on_step=keep_first_grads,
                loss_weight=SFT_LOSS_WEIGHT, lengths=[len(e["input_ids"]) for e in data] if packed else None)
    t.fit(data, progress=False)
    return t, grads


def _rank(rank: int, world: int, port: int, model_dir: str, run_dir: str, cfg: dict) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        for packed in (False, True):
            out = run_dir + ("-packed" if packed else "")
            t, grads = _train(model_dir, out, cfg, packed)
            torch.save({"weights": t.model.state_dict(), "grads": grads}, os.path.join(out, f"rank{rank}.pt"))
    finally:
        dist.teardown()


def test_two_processes_equal_one_process_with_double_batch(tiny_llama_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")  # both ranks are on this machine
    two = tmp_path / "two"
    torch.multiprocessing.spawn(_rank, args=(2, dist.free_port(), str(tiny_llama_dir), str(two),
                                             {**CFG, "batch_size": 2}), nprocs=2)
    one, grads1 = _train(tiny_llama_dir, tmp_path / "one", {**CFG, "batch_size": 4})
    accum, grads_a = _train(tiny_llama_dir, tmp_path / "accum", {**CFG, "batch_size": 2, "grad_accum": 2})

    r2, r1, ra = read_metrics(two), read_metrics(tmp_path / "one"), read_metrics(tmp_path / "accum")
    rp = read_metrics(tmp_path / "two-packed")
    assert [r["batch"] for r in r2] == [r["batch"] for r in r1] == [r["batch"] for r in ra] == [r["batch"] for r in rp]
    assert all(len(r["batch"]) == 4 for r in r2)
    assert any(r["micro_batches"] > 2 for r in rp)  # some rank split its two examples by the token budget
    for recs in (r2, ra, rp):
        assert [r["loss"] for r in recs] == pytest.approx([r["loss"] for r in r1], rel=1e-5)
        assert [r["trained_tokens"] for r in recs] == [r["trained_tokens"] for r in r1]
    # the same gradient at step 1 (same start weights), on both ranks
    r0, r1_ = torch.load(two / "rank0.pt"), torch.load(two / "rank1.pt")
    p0 = torch.load(tmp_path / "two-packed" / "rank0.pt")
    for name, g in grads1.items():
        for other in (r0["grads"][name], r1_["grads"][name], grads_a[name], p0["grads"][name]):
            assert torch.allclose(other, g, rtol=1e-4, atol=1e-6), name  # |g| up to ~0.06
    # the same weights after 3 AdamW steps: Adam divides by sqrt(v), which turns rounding-level
    # differences of near-zero gradient entries into steps of up to ~lr/10, hence atol 1e-4
    weights = r0["weights"]
    for name, p in one.model.state_dict().items():
        assert torch.equal(weights[name], r1_["weights"][name]), name  # ranks stay in lockstep
        assert torch.allclose(weights[name], p, atol=1e-4), name
        assert torch.allclose(accum.model.state_dict()[name], p, atol=1e-4), name
        assert torch.allclose(p0["weights"][name], p, atol=1e-4), name
    assert not torch.allclose(weights["model.norm.weight"], AutoModelForCausalLM.from_pretrained(
        tiny_llama_dir).state_dict()["model.norm.weight"])  # it trained

    # the logged loss is the mean over the batch's labelled tokens, not a mean of rank means
    data, start = sft_examples(), AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    with torch.no_grad():
        per = [(float(sft_loss(start, collate([data[i]], 0))), sum(x != IGNORE for x in data[i]["labels"]))
               for i in r2[0]["batch"]]
    token_mean = sum(loss * n for loss, n in per) / sum(n for _, n in per)
    assert r2[0]["loss"] == pytest.approx(token_mean, rel=1e-5)
    rank_means = [sum(loss * n for loss, n in per[r::2]) / sum(n for _, n in per[r::2]) for r in (0, 1)]
    assert abs(sum(rank_means) / 2 - token_mean) > 1e-3  # the data makes the choice matter


def test_to_args_rebuilds_the_configs():
    got = []
    app = typer.Typer()

    @config_command(app, "x", SFTConfig, TrainConfig)
    def x(sft, train, data_root=None):
        got.append((sft, train))

    @app.command("unused")
    def unused() -> None:
        pass

    sft = SFTConfig(data="d", out="o w", max_len=77, validated_only=False, cases="a,b")
    train = TrainConfig(lr=3.5e-4, resume=True, bf16=False, nproc=2)
    res = CliRunner().invoke(app, ["x", *to_args(sft, train)])
    assert res.exit_code == 0, res.output
    assert got == [(sft, train)]


def test_failure_reason_prefers_the_rank_line():
    out = ("train: 50%|#   \r" "Traceback ...\nValueError: inner\n"
           "forgeplay rank 1 failed: ValueError: no trainable trajectories\nChildFailedError\n")
    assert dist.failure_reason(out) == "rank 1 failed: ValueError: no trainable trajectories"
    assert dist.failure_reason("x\nKeyError: 'a'\nend") == "KeyError: 'a'"


@pytest.fixture(scope="module")
def short_root(traj_root):  # noqa: F811
    """Dataset "s": the synthesized trajectories cut after their first assistant reply
    (a few hundred tokens each, so a training step is cheap)."""
    root, rows = traj_root
    short = [{**r, "messages": [{**r["messages"][0], "content": "Answer with the tools."}, *r["messages"][1:3]]}
             for r in rows]
    assert all(r["messages"][2]["role"] == "assistant" for r in short)
    write_rows(root, "s", "trajectories", "run", short)
    return root


def _cli(args: list[str]):
    from flows.cli import app

    return CliRunner().invoke(app, args)


def test_cli_nproc_2_trains_and_resumes(short_root, tiny_llama_dir, tmp_path):
    root = short_root
    out = tmp_path / "run"
    base = ["train", "sft", "--dataset", "s", "--model", str(tiny_llama_dir), "--out", str(out), "--max-len", "2048",
            "--limit", "4", "--data-root", str(root), "--nproc", "2", "--batch-size", "1", "--lr", "1e-3", "--keep-checkpoints"]
    res = _cli([*base, "--max-steps", "1"])
    assert res.exit_code == 0, res.output
    recs = read_metrics(out)
    assert [r["step"] for r in recs] == [1] and len(recs[0]["batch"]) == 2  # one example per process
    assert (out / "checkpoints" / "latest").read_text() == "step-00000001"
    assert json.loads((out / "config.json").read_text())["train"]["nproc"] == 2
    assert (out / "curves.png").exists()

    res = _cli([*base, "--max-steps", "2", "--resume"])
    assert res.exit_code == 0, res.output
    recs = read_metrics(out)
    assert [r["step"] for r in recs] == [1, 2]
    assert (out / "checkpoints" / "latest").read_text() == "step-00000002"
    # the data position was restored: step 2 takes the rest of epoch 1's order
    order = np.random.default_rng([0, 0]).permutation(4).tolist()
    assert [recs[0]["batch"], recs[1]["batch"]] == [order[:2], order[2:]]
    final = AutoModelForCausalLM.from_pretrained(out / "final")  # saved once, from rank 0's model
    saved = torch.load(checkpoint.latest(out) / "model.pt")
    assert all(torch.equal(saved[k], v) for k, v in final.state_dict().items() if k in saved)


def test_failed_rank_is_reported_in_one_line(short_root, tiny_llama_dir, tmp_path):
    """Weights the ranks cannot read (the launcher's checks pass): `python -m train --nproc 2`
    exits 1 with the failing rank's error, and no final model is written."""
    root = short_root
    broken = tmp_path / "broken"
    shutil.copytree(tiny_llama_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "train", "sft", "--model", str(broken), "--out", str(out),
                          "--dataset", "s", "--data-root", str(root), "--nproc", "2", "--max-steps", "1"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stderr[-2000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("train sft failed: 2-process training failed") and "rank " in last, last
    assert not (out / "final").exists() and not (out / "metrics.jsonl").exists()

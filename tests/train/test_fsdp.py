"""Sharded training (train/shard.py, FSDP2's fully_shard over two gloo ranks on CPU, tiny random
Llama): sharded SFT steps (full, grad_op, packed micro-batches that differ in number between
the ranks, activation checkpointing) equal one unsharded process with the whole batch; a
sharded checkpoint resumes to the same weights as the run that was not stopped, and
consolidates into a model folder the transformers backend loads; `train grpo --nproc 2
--shard full` (torchrun; rank 1 loads no weights, the KL reference sharded too) equals `--shard
none`; the memory plan's 7B table."""

from __future__ import annotations

import json
import os

import pytest
import torch
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from tests.train.test_distributed import CFG, _train, sft_examples
from tests.train.test_rollout import world  # noqa: F401 (fixture: the shared world's triples)
from train import checkpoint, dist
from train.configs import TrainConfig
from train.memory import GB, MemoryPlanError, ModelShape, Workload, make_plan, state_table
from train.sft import make_step
from train.shard import full_state_dict
from train.stages import SFT_LOSS_WEIGHT
from train.trainer import Trainer, read_metrics

VARIANTS = {"full": {}, "grad_op": {}, "packed": {"max_batch_tokens": 30}, "checkpointed": {}}


def _sharded(model_dir, out: str, cfg: dict, variant: str) -> Trainer:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    packed = variant == "packed"
    if packed:
        from train.packing import use_packed_attention

        use_packed_attention(model)
    if variant == "checkpointed":
        model.gradient_checkpointing_enable({"use_reentrant": False})
    data = sft_examples()
    shard = "grad_op" if variant == "grad_op" else "full"
    t = Trainer(model, TrainConfig(**{**cfg, **VARIANTS[variant], "shard": shard}), out, make_step(0, packed),
                loss_weight=SFT_LOSS_WEIGHT, lengths=[len(e["input_ids"]) for e in data] if packed else None)
    t.fit(data, progress=False)
    return t


def _rank(rank: int, world_size: int, port: int, model_dir: str, out: str) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                         world_size=world_size)
    try:
        cfg = {**CFG, "batch_size": 2}
        for variant in VARIANTS:
            t = _sharded(model_dir, f"{out}/{variant}", cfg, variant)
            weights = full_state_dict(t.model)
            if rank == 0:
                torch.save(weights, f"{out}/{variant}/weights.pt")
        # stopped after step 2 (its checkpoint), then resumed for step 3
        _sharded(model_dir, f"{out}/resumed", {**cfg, "max_steps": 2}, "full")
        t = _sharded(model_dir, f"{out}/resumed", {**cfg, "resume": True}, "full")
        weights = full_state_dict(t.model)
        if rank == 0:
            torch.save(weights, f"{out}/resumed/weights.pt")
    finally:
        dist.teardown()


@pytest.fixture(scope="module")
def sharded_runs(tiny_llama_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # both ranks are on this machine
    # one torch thread a rank: a thread count that follows the machine's load changes float sums
    os.environ.setdefault("FORGEPLAY_THREADS", "1")
    torch.multiprocessing.spawn(_rank, args=(2, dist.free_port(), str(tiny_llama_dir), str(out)), nprocs=2)
    one, _ = _train(tiny_llama_dir, out / "one", {**CFG, "batch_size": 4})
    return out, one


def test_sharded_sft_steps_equal_one_unsharded_process(sharded_runs):
    out, one = sharded_runs
    ref, base = read_metrics(out / "one"), one.model.state_dict()
    diffs = {}
    for variant in VARIANTS:
        recs = read_metrics(out / variant)
        assert [r["batch"] for r in recs] == [r["batch"] for r in ref]
        assert [r["loss"] for r in recs] == pytest.approx([r["loss"] for r in ref], rel=1e-5), variant
        assert [r["grad_norm"] for r in recs] == pytest.approx([r["grad_norm"] for r in ref], rel=1e-4), variant
        weights = torch.load(out / variant / "weights.pt")
        diffs[variant] = max(float((weights[k] - v).abs().max()) for k, v in base.items())
        # the tolerance of test_distributed: Adam turns rounding-level gradient differences of
        # near-zero entries into steps of up to ~lr/10
        assert diffs[variant] < 1e-4, (variant, diffs)
    assert any(r["micro_batches"] > 2 for r in read_metrics(out / "packed"))  # the token budget split some
    print("max abs weight diff, sharded vs unsharded after 3 steps:", diffs)


def test_a_sharded_checkpoint_resumes_to_the_same_weights(sharded_runs):
    out, _ = sharded_runs
    full, resumed = torch.load(out / "full" / "weights.pt"), torch.load(out / "resumed" / "weights.pt")
    assert [r["step"] for r in read_metrics(out / "resumed")] == [1, 2, 3]
    # to float tolerance: the uninterrupted and the resumed run are separate processes
    assert [r["loss"] for r in read_metrics(out / "resumed")] == pytest.approx(
        [r["loss"] for r in read_metrics(out / "full")], rel=1e-6)
    for k, v in full.items():
        assert torch.allclose(resumed[k], v, rtol=0, atol=1e-6), k
    ck = checkpoint.latest(out / "resumed")
    assert ck.name == "step-00000003" and (ck / checkpoint.SHARDED / ".metadata").exists()
    assert not (ck / "model.pt").exists()


def test_a_consolidated_checkpoint_loads_in_the_transformers_backend(sharded_runs, tiny_llama_dir, tmp_path):
    from flows.cli import app
    from generators.llm.transformers_backend import TransformersBackend

    out, _ = sharded_runs
    res = CliRunner().invoke(app, ["train", "consolidate", str(out / "full"), "--out", str(tmp_path / "m"),
                                   "--model", str(tiny_llama_dir)])
    assert res.exit_code == 0, res.output
    backend = TransformersBackend(str(tmp_path / "m"))
    trained = torch.load(out / "full" / "weights.pt")
    got = backend.lm.state_dict()
    assert all(torch.equal(got[k], v) for k, v in trained.items())
    assert backend.lm.lm_head.weight is backend.lm.model.embed_tokens.weight  # still tied
    res = CliRunner().invoke(app, ["train", "consolidate", str(tmp_path), "--out", str(tmp_path / "x")])
    assert res.exit_code == 1 and "no complete checkpoint" in res.output


def test_train_plan_prints_the_7b_table_of_the_docstring():
    from flows.cli import app

    rows = state_table(7e9, 8)
    assert {k: round(v["total"] / GB, 3) for k, v in rows.items()} == {"none": 112.0, "full": 16.625, "grad_op": 29.75}
    # by hand: 16 bytes a parameter whole; divided by 8, plus the gathered blocks (B = P/32)
    p, b = 7e9, 7e9 / 32
    assert rows["full"]["total"] == pytest.approx(16 * p / 8 + 2 * 2 * b + 4 * 2 * b)
    assert rows["grad_op"]["total"] == pytest.approx(16 * p / 8 + 2 * p + 4 * 2 * b)
    res = CliRunner().invoke(app, ["train", "plan", "--model-size", "7e9", "--nproc", "8", "--memory-gb", "80"])
    assert res.exit_code == 0, res.output
    lines = {ln.split("│")[1].strip(): ln for ln in res.output.splitlines() if ln.count("│") > 3}
    assert "112.00" in lines["none"] and lines["none"].rstrip(" │").endswith("no")
    assert "16.62" in lines["full"] and "29.75" in lines["grad_op"] and lines["full"].rstrip(" │").endswith("yes")
    res = CliRunner().invoke(app, ["train", "plan", "--model-size", "0"])
    assert res.exit_code == 1 and "--model-size must be > 0" in res.output


def test_the_plan_divides_the_state_and_refuses_with_one_line(tiny_llama_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    work = Workload(64, 64, "64 tokens", "--max-batch-tokens")
    none = make_plan(model, work, TrainConfig(nproc=2), limit=100 * GB)
    full = make_plan(model, work, TrainConfig(nproc=2, shard="full"), limit=100 * GB)
    assert full.parts["optimizer"] == pytest.approx(none.parts["optimizer"] / 2)
    assert full.parts["weights"] == pytest.approx(none.parts["weights"] / 2) and "gathered" not in none.parts
    assert "--shard full over 2" in full.line()
    # a frozen reference is sharded with the policy: half its weights plus its root and two blocks
    shape = ModelShape.of(model)
    ref = Workload(64, 64, "64 tokens", "--max-batch-tokens", frozen=[(shape, 64)])
    none_ref = make_plan(model, ref, TrainConfig(nproc=2), limit=100 * GB).parts["frozen models"]
    full_ref = make_plan(model, ref, TrainConfig(nproc=2, shard="full"), limit=100 * GB).parts["frozen models"]
    assert none_ref - full_ref == pytest.approx(4 * shape.params / 2 - 4 * (shape.root_params + 2 * shape.block_params))
    with pytest.raises(MemoryPlanError, match="--shard full --nproc N") as e:
        make_plan(model, work, TrainConfig(nproc=1), limit=1e6).check()
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="--shard must be one of none, full, grad_op"):
        make_plan(model, work, TrainConfig(shard="zero3"), limit=GB)


def test_grpo_sharded_in_two_processes_equals_unsharded(world, tiny_llama_dir, tmp_path):  # noqa: F811
    """`train grpo --nproc 2 --kl-coef 0.04` (torchrun, gloo): the same rollouts, losses, KL and
    weights with `--shard full` (the policy and its KL reference sharded) as with `--shard none`
    (each rank samples its own prompts with whole weights)."""
    from flows.cli import app

    root = world[0]
    outs = {}
    for mode in ("none", "full"):
        out = tmp_path / mode
        res = CliRunner().invoke(app, [
            "train", "grpo", "--dataset", "w", "--model", str(tiny_llama_dir), "--out", str(out), "--limit", "4",
            "--group-size", "2", "--max-turns", "1", "--max-new-tokens", "6", "--tool-style", "compact",
            "--data-root", str(root), "--nproc", "2", "--batch-size", "1", "--max-steps", "2", "--lr", "1e-3",
            "--schedule", "constant", "--shard", mode, "--keep-checkpoints", "--kl-coef", "0.04"])
        assert res.exit_code == 0, res.output
        outs[mode] = out
    a, b = read_metrics(outs["none"]), read_metrics(outs["full"])
    assert [r["batch"] for r in a] == [r["batch"] for r in b]
    for key in ("reward", "tokens"):
        assert [r[key] for r in a] == [r[key] for r in b], key
    assert [r["kl"] for r in b] == pytest.approx([r["kl"] for r in a], rel=1e-4, abs=1e-7)
    assert [r["loss"] for r in b] == pytest.approx([r["loss"] for r in a], rel=1e-5, abs=1e-7)
    wa = AutoModelForCausalLM.from_pretrained(outs["none"] / "final").state_dict()
    wb = AutoModelForCausalLM.from_pretrained(outs["full"] / "final").state_dict()
    diff = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    assert diff < 1e-4, diff
    assert json.loads((outs["full"] / "config.json").read_text())["train"]["shard"] == "full"
    assert (checkpoint.latest(outs["full"]) / checkpoint.SHARDED).is_dir()
    print("GRPO max abs weight diff, --shard full vs none after 2 steps:", diff)


def test_sharded_under_torchrun_only_rank_0_reads_the_weights(tiny_llama_dir, monkeypatch):
    """`load_model` with --shard full in a rank of several: rank 0 reads the weights into host
    memory, the others build the model on the meta device (train/shard.py `shard_from_first`
    hands them their slices: the GRPO, label-aware and self-play tests above run that way)."""
    from train.stages import load_model

    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank, device in (("0", "cpu"), ("1", "meta")):
        monkeypatch.setenv("RANK", rank)
        model = load_model(str(tiny_llama_dir), "cpu", "full")[2]
        assert {p.device.type for p in model.parameters()} == {device}, rank
        assert model.lm_head.weight is model.model.embed_tokens.weight  # still tied
    assert next(load_model(str(tiny_llama_dir), "cpu", "none")[2].parameters()).device.type == "cpu"

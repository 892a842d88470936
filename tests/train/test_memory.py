"""Memory (train/memory.py, train/packing.py): a packed training step's peak memory grows about
linearly with the length (measured in fresh processes) and no tensor of the step is S x S; the
memory plan decides checkpointing, and a plan that cannot fit stops the command with one line
naming the settings to change, before anything is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from tests.train.test_distributed import short_root  # noqa: F401 (fixture: dataset "s" of short trajectories)
from tests.train.test_sft import traj_root  # noqa: F401 (fixture: synthesized trajectories)
from train.configs import TrainConfig
from train.memory import GB, MemoryPlanError, ModelShape, Workload, make_plan
from train.packing import IGNORE, pack, use_packed_attention

ROOT = Path(__file__).resolve().parents[2]


def step_peak(model_dir, length: int) -> dict:
    """tests/train/step_memory.py in a fresh process: one packed step of `length` tokens."""
    res = subprocess.run([sys.executable, "-m", "tests.train.step_memory", str(model_dir), str(length), "packed", "off"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_peak_memory_of_a_step_grows_about_linearly_with_length(tiny_llama_dir):
    """Doubling the tokens of a packed row (four conversations) less than doubles the step's
    memory (fixed costs: logits chunks, gradients); an S x S attention matrix per head (eager
    attention) makes the same doubling cost 3.4x on this model."""
    short, long = step_peak(tiny_llama_dir, 4096), step_peak(tiny_llama_dir, 8192)
    ratio = long["step_mb"] / short["step_mb"]
    print(f"step memory: {short['step_mb']:.0f} MB at 4096 tokens, {long['step_mb']:.0f} MB at 8192: x{ratio:.2f}")
    assert 1.0 < ratio < 2.5


class Shapes(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the shape of every tensor an operation returns."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.shapes.append(tuple(t.shape))
        return out


def square_tensors(model, n: int = 600) -> list[tuple]:
    """Shapes with two dimensions >= the row length of a packed step over four conversations."""
    g = torch.Generator().manual_seed(0)
    convs = [torch.randint(5, 4000, (n // 4,), generator=g).tolist() for _ in range(4)]
    batch = pack([{"input_ids": c, "labels": c} for c in convs])
    from train.sft import sft_loss

    with Shapes() as rec:
        sft_loss(model, batch).backward()
    return [s for s in rec.shapes if sum(d >= n for d in s) >= 2]


def test_a_packed_step_builds_no_square_matrix(tiny_llama_dir):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    model.gradient_checkpointing_enable({"use_reentrant": False})
    model.train()
    assert square_tensors(model)  # transformers' own sdpa path on packed rows: a block-diagonal mask
    use_packed_attention(model)
    assert square_tensors(model) == []


# ---- the plan ---------------------------------------------------------------------------------

def test_auto_checkpointing_is_on_where_activations_outweigh_the_model(tiny_llama_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    auto = TrainConfig()
    short = make_plan(model, Workload(64, 8, "64 tokens", "--max-batch-tokens"), auto, limit=100 * GB)
    long = make_plan(model, Workload(65536, 4000, "65536 tokens", "--max-batch-tokens"), auto, limit=100 * GB)
    assert not short.checkpointing and long.checkpointing
    off = make_plan(model, long.work, TrainConfig(activation_checkpointing="off"), limit=100 * GB)
    assert off.parts["activations"] > long.parts["activations"] and off.peak > long.peak
    # needed to fit: on, even where activations are small
    tight = make_plan(model, short.work, auto, limit=short.peak - 1)
    assert tight.checkpointing or tight.peak > tight.limit
    shape = ModelShape.of(model)
    assert (shape.layers, shape.hidden, shape.active_layers) == (2, 128, 2)
    assert long.peak == pytest.approx(sum(long.parts.values()))
    assert "memory plan:" in long.line() and "checkpointing" in long.line()
    blocked = Workload(65536, 4000, "", "", checkpointing_blocked="--prefix-grouping needs the KV cache")
    assert not make_plan(model, blocked, auto, limit=100 * GB).checkpointing
    with pytest.raises(ValueError, match="prefix-grouping"):
        make_plan(model, blocked, TrainConfig(activation_checkpointing="on"), limit=100 * GB)
    with pytest.raises(ValueError, match="activation-checkpointing must be one of"):
        make_plan(model, short.work, TrainConfig(activation_checkpointing="sometimes"), limit=100 * GB)


def test_a_plan_that_cannot_fit_names_the_settings(tiny_llama_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    plan = make_plan(model, Workload(8192, 600, "8192 tokens a micro-batch", "--max-batch-tokens"),
                     TrainConfig(activation_checkpointing="off", memory_gb=0.2))
    with pytest.raises(MemoryPlanError) as e:
        plan.check()
    msg = str(e.value)
    assert "\n" not in msg and "0.2 GB is available" in msg
    assert all(s in msg for s in ("--max-batch-tokens", "--activation-checkpointing", "--memory-gb"))


def test_the_command_stops_before_writing_when_the_plan_cannot_fit(short_root, tiny_llama_dir, tmp_path):  # noqa: F811
    """`forgeplay train sft` and `python -m train sft`: exit 2, the reason in one line, no run folder."""
    from flows.cli import app

    out = tmp_path / "run"
    args = ["sft", "--dataset", "s", "--model", str(tiny_llama_dir), "--out", str(out), "--memory-gb", "0.3",
            "--data-root", str(short_root)]
    res = CliRunner().invoke(app, ["train", *args])
    assert res.exit_code == 2, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("train sft failed: training needs about") and "--max-batch-tokens" in last, last
    res = subprocess.run([sys.executable, "-m", "train", *args], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1].startswith("train sft failed: training needs about")
    assert not out.exists()

"""Slow: README's `forgeplay train sft` command runs to completion on the output of
`forgeplay pipeline` (the stages `make run`'s loop starts with: a world of 1,000 entities, 16 trajectories with full JSON tool schemas,
2.5-6.6k tokens each, validated into `demo_valid`), with one optimizer step of one conversation
instead of README's count so CI stays short: the peak memory is decided by one packed
micro-batch and the model's weights, gradients and optimizer state, not by how many
micro-batches a step accumulates (a step of the default batch took 18 minutes of CI on two
cores, one of two conversations in two micro-batches about 4). Before that step the command's
memory plan checks the largest micro-batch these settings make (the longest conversation, 6.6k
tokens), and tests/train/test_memory.py measures how a step's peak grows with its length. The
pipeline runs with `--texts template`: the program writes the reasoning instead of the embedded
model, which changes a few words per think but not what decides the memory (the schemas, the
turns, the lengths), and saves the 15-20 minutes the model takes to write them on two cores.
Before the memory plan and packed batches this command was killed by the kernel's OOM killer on
a 24 GB machine."""

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_command() -> list[str]:
    """The arguments of README's `forgeplay train sft --dataset demo_valid ...` line."""
    line = next(ln for ln in README.read_text().splitlines() if ln.startswith("forgeplay train sft --dataset demo_valid"))
    return shlex.split(line.split("#")[0])[1:]


def test_readme_sft_command_completes_on_make_run_output(embedded_dir, data_root, tmp_path):
    res = CliRunner().invoke(app, ["pipeline", "--model", str(embedded_dir), "--texts", "template"])
    assert res.exit_code == 0, res.output
    args = readme_command()
    at = args.index("--max-steps")
    args[at + 1] = "1"
    args += ["--batch-size", "1"]
    out = tmp_path / "runs" / "sft"
    args[args.index("--out") + 1] = str(out)
    res = CliRunner().invoke(app, [*args, "--model", str(embedded_dir)])
    assert res.exit_code == 0, res.output
    assert (out / "final" / "config.json").exists()
    rec = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    train_cfg = json.loads((out / "config.json").read_text())["train"]
    assert rec["step"] == 1 and rec["tokens"] > 2000 and rec["tokens_per_s"] > 0  # a full-schema conversation
    assert 0 < rec["peak_mem_gb"] < 8, rec  # the plan's default keeps the full model's step well inside the machine
    assert train_cfg["max_batch_tokens"] == 8192

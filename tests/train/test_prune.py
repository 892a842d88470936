"""A finished training stage keeps its final model and, by default, removes its checkpoints
(model, optimizer, scheduler and RNG state of each saved step: most of a run folder's bytes);
`keep_checkpoints` (`--keep-checkpoints`) keeps them. Trained on the tiny random Llama with the
toy kind of tests/train/test_stages.py, written by the trainer's own checkpoint code."""

from __future__ import annotations

import torch
import typer
from typer.testing import CliRunner

from tests.train.test_stages import ToyConfig, toy  # noqa: F401 (toy: the registered toy kind)
from train import checkpoint
from train.configs import TrainConfig
from train.run import run_stage


def _files(folder) -> dict[str, bytes]:
    """The final folder's files but its weights (config, tokenizer, records), as bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and p.suffix != ".safetensors"}


def _weights(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(f).items()}


def test_the_default_prunes_checkpoints_and_keep_checkpoints_keeps_them(toy, tiny_llama_dir, tmp_path):  # noqa: F811
    pruned, kept = tmp_path / "pruned", tmp_path / "kept"
    for out, keep in ((pruned, False), (kept, True)):
        cfg = ToyConfig(data="t", model=str(tiny_llama_dir), out=str(out), n=4)
        summary = run_stage("toy", cfg, TrainConfig(max_steps=2, batch_size=2, checkpoint_every=1,
                                                    keep_checkpoints=keep), tmp_path, progress=False)
        assert summary["final_model"] == str(out / "final") and (out / "metrics.jsonl").exists()
    assert not (pruned / "checkpoints").exists()
    assert sorted(p.name for p in (kept / "checkpoints").glob("step-*")) == ["step-00000001", "step-00000002"]
    assert (kept / "checkpoints" / "step-00000002" / "optimizer.pt").exists()
    # the same trained model either way: the same files, and weights equal up to float rounding
    # (two runs in one process may sum in a different order on another CPU)
    assert _files(pruned / "final") == _files(kept / "final")
    a, b = _weights(pruned / "final"), _weights(kept / "final")
    assert a and a.keys() == b.keys()
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    # the final model is the last step's weights, as the kept checkpoint holds them
    last = torch.load(checkpoint.latest(kept) / "model.pt")
    from transformers import AutoModelForCausalLM

    final = AutoModelForCausalLM.from_pretrained(kept / "final").state_dict()  # the same run: bit for bit
    assert all(torch.equal(last[k], v) for k, v in final.items() if k in last)


def test_prune_needs_the_final_model(tiny_llama_dir, tmp_path):
    """A run folder without final/ (a killed run) keeps its checkpoints: they are what resumes it."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    checkpoint.save(tmp_path, 1, model, opt, state={"consumed": 2})
    assert checkpoint.prune(tmp_path) == 0 and checkpoint.latest(tmp_path).name == "step-00000001"
    model.save_pretrained(tmp_path / "final")
    size = sum(f.stat().st_size for f in (tmp_path / "checkpoints").rglob("*") if f.is_file())
    assert checkpoint.prune(tmp_path) == size > 0
    assert not (tmp_path / "checkpoints").exists() and (tmp_path / "final" / "config.json").exists()


def test_keep_checkpoints_is_an_option_of_every_training_command():
    from flows.cli_train import register

    app = typer.Typer()
    register(app)
    for kind in ("sft", "grpo"):
        res = CliRunner().invoke(app, ["train", kind, "--help"], env={"COLUMNS": "200"})
        assert res.exit_code == 0 and "--keep-checkpoints" in res.output, res.output

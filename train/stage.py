"""The training stages as plain functions, without Prefect: the `train-sft`/`train-grpo` flows
(flows/train.py) call them in process, and every rank of `python -m train sft|grpo` (under
torchrun, `--nproc N`) runs `run_sft`/`run_grpo`, so both paths train with the same code.

    path, tok, model = load_model(None, device)            # None: the embedded model
    records = run_sft(SFTConfig(data="demo", out="runs/s"), TrainConfig(), root, device)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from train.configs import GRPOConfig, SFTConfig, TrainConfig
from train.trainer import Trainer

# the stat each step function reports whose count its loss is a mean over (train/trainer.py)
SFT_LOSS_WEIGHT = "trained_tokens"  # cross entropy is a mean over the labelled tokens
GRPO_LOSS_WEIGHT = "tokens"  # the token-mean surrogate is a mean over the policy's tokens


def load_model(name: str | None, device=None):
    """(path, tokenizer, float32 model on `device`; default: cuda when there is one)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from generators.llm.model_store import resolve_model

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = resolve_model(name)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return path, tok, model.to(device)


def prepare_run(cfg, config: dict) -> Path:
    """Check --data/--out, create the run folder and write the resolved config.json."""
    if not cfg.data or not cfg.out:
        raise ValueError("--data and --out are required")
    run_dir = Path(cfg.out)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(config, indent=2))
    return run_dir


def sft_examples(root, cfg: SFTConfig, tokenizer) -> tuple[list, dict]:
    """Tokenized trajectories and their counts; ValueError when none is trainable."""
    from train.sft import load_examples

    examples, counts = load_examples(root, cfg.data, tokenizer, cfg)
    if not examples:
        raise ValueError(f"no trainable trajectories in {cfg.data!r}: {counts}")
    return examples, counts


def fit(model, tcfg: TrainConfig, run_dir, step_fn, data, loss_weight: str | None, progress: bool = True) -> list[dict]:
    return Trainer(model, tcfg, run_dir, step_fn, loss_weight=loss_weight).fit(data, progress=progress)


def load_sft_model(cfg: SFTConfig, device=None):
    """`load_model` with only the last `cfg.train_layers` blocks trainable (0 = all):
    (path, tokenizer, model, {"trainable", "total"} parameter counts)."""
    from train.sft import train_last_layers

    path, tok, model = load_model(cfg.model, device)
    return path, tok, model, train_last_layers(model, cfg.train_layers)


def run_sft(cfg: SFTConfig, tcfg: TrainConfig, root, device=None, progress: bool = True):
    """Load the model and the data and train (one rank's part when torch.distributed is up).
    Returns (records, model, tokenizer)."""
    from train.sft import make_step

    _, tok, model, _ = load_sft_model(cfg, device)
    examples, _ = sft_examples(root, cfg, tok)
    recs = fit(model, tcfg, cfg.out, make_step(tok.pad_token_id), examples, SFT_LOSS_WEIGHT, progress)
    return recs, model, tok


def run_grpo(cfg: GRPOConfig, tcfg: TrainConfig, root, device=None, progress: bool = True):
    """GRPO: each rank rolls out its own share of the prompts (a whole group stays on one rank).
    Returns (records, model, tokenizer)."""
    from train.grpo import build_session

    path, tok, model = load_model(cfg.model, device)
    session = build_session(root, cfg, path, model)
    recs = fit(model, tcfg, cfg.out, session.step, session.prompts, grpo_loss_weight(cfg), progress)
    return recs, model, tok


def grpo_loss_weight(cfg: GRPOConfig) -> str | None:
    """Policy tokens for the token-mean surrogate; other aggregates weigh micro-batches equally."""
    return GRPO_LOSS_WEIGHT if getattr(cfg, "aggregate", "token-mean") == "token-mean" else None


CURVES = {"sft": ("loss", "lr", "tokens_per_s"), "grpo": ("loss", "reward", "tokens_per_s")}


def finish(kind: str, model, tokenizer, run_dir) -> tuple[Path | None, Path]:
    """Write the curves PNG and the trained model folder RUN_DIR/final; (png, final)."""
    from train.sft import save_final
    from train.trainer import plot_metrics

    return plot_metrics(run_dir, CURVES[kind]), save_final(model, tokenizer, run_dir)


def count_prompts(root, cfg: GRPOConfig) -> int:
    """How many prompts GRPO will train on (without loading the model); ValueError when none."""
    from storage import load_table

    n = load_table(cfg.data, "triples", root, columns=["triple_id"]).num_rows
    n = min(n, cfg.limit) if cfg.limit else n
    if not n:
        raise ValueError(f"dataset {cfg.data!r} has no triples")
    return n

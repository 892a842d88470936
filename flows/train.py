"""The training Prefect flows: `train-sft` (fine-tune on a dataset's trajectories) and
`train-grpo` (GRPO with multi-turn tool rollouts on a dataset's triples).

Tasks: load + tokenize (or load triples), then the training loop as one task (train/
trainer.py: progress bar with step, loss, reward, tokens/s; metrics.jsonl; atomic
checkpoints), then the curves PNG, the final model folder `RUN_DIR/final` and an artifact.
`resume=True` continues from the run folder's latest complete checkpoint after a kill.

    forgeplay train sft --data demo --out runs/sft1 --max-steps 50
    forgeplay train grpo --data demo --out runs/grpo1 --max-steps 20 --resume
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NONE

from flows.common import publish_artifact
from storage import resolve_root
from train.trainer import Trainer, TrainConfig, plot_metrics


def _load_model(name: str | None):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from generators.llm.embedded import resolve_model

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = resolve_model(name)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if torch.cuda.is_available():
        model = model.cuda()
    return path, tok, model


def _start(cfg, config: dict):
    """Check --data/--out, create the run folder with the resolved config, load the model."""
    if not cfg.data or not cfg.out:
        raise ValueError("--data and --out are required")
    run_dir = Path(cfg.out)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(config, indent=2))
    return (run_dir, *_load_model(cfg.model))


@task(name="tokenize-trajectories", cache_policy=NONE, retries=1)
def sft_data_task(root: str, sft: dict, tokenizer) -> tuple[list, dict]:
    from train.sft import SFTConfig, load_examples

    cfg = SFTConfig(**sft)
    return load_examples(root, cfg.data, tokenizer, cfg)


@task(name="train-loop", cache_policy=NONE)
def train_task(model, tcfg: dict, run_dir: str, step_fn, examples, progress: bool) -> list[dict]:
    return Trainer(model, TrainConfig(**tcfg), run_dir, step_fn).fit(examples, progress=progress)


def _finish(model, tok, run_dir: Path, keys, title: str, stages: list, counts: dict) -> dict:
    from train.sft import save_final
    from train.trainer import read_metrics

    png = plot_metrics(run_dir, keys)
    final = save_final(model, tok, run_dir)
    recs = read_metrics(run_dir)
    summary = {"run_dir": str(run_dir), "final_model": str(final), "curves": str(png) if png else None,
               "steps": recs[-1]["step"] if recs else 0, "first": recs[0] if recs else None,
               "last": recs[-1] if recs else None, "counts": counts}
    summary["report"] = publish_artifact(title.split()[0], title, stages, {"data": counts})
    return summary


@flow(name="train-sft", log_prints=True)
def sft_flow(sft: dict, train: dict, data_root: str | None = None, progress: bool = True) -> dict:
    """Fine-tune `sft["model"]` on the trajectories of `sft["data"]` (SFTConfig/TrainConfig fields)."""
    from train.sft import SFTConfig, make_step, train_last_layers

    cfg, root = SFTConfig(**sft), str(resolve_root(data_root))
    t = time.perf_counter()
    run_dir, path, tok, model = _start(cfg, {"sft": sft, "train": train})
    examples, counts = sft_data_task(root, sft, tok)
    if not examples:
        raise ValueError(f"no trainable trajectories in {cfg.data!r}: {counts}")
    params = train_last_layers(model, cfg.train_layers)
    counts["trainable_params"], counts["params"] = params["trainable"], params["total"]
    stages = [{"stage": "load + tokenize", "rows_in": counts["rows"], "rows_out": len(examples),
               "seconds": time.perf_counter() - t, "notes": f"model {path}"}]
    t = time.perf_counter()
    recs = train_task(model, train, str(run_dir), make_step(tok.pad_token_id), examples, progress)
    stages.append({"stage": "train", "rows_in": len(examples), "rows_out": len(recs), "seconds": time.perf_counter() - t})
    return _finish(model, tok, run_dir, ("loss", "lr", "tokens_per_s"), f"train-sft {cfg.data}", stages, counts)


@flow(name="train-grpo", log_prints=True)
def grpo_flow(grpo: dict, train: dict, data_root: str | None = None, progress: bool = True) -> dict:
    """GRPO on the triples of `grpo["data"]` with tool rollouts (GRPOConfig/TrainConfig fields)."""
    from train.grpo import GRPOConfig, build_session

    cfg, root = GRPOConfig(**grpo), str(resolve_root(data_root))
    t = time.perf_counter()
    run_dir, path, tok, model = _start(cfg, {"grpo": grpo, "train": train})
    session = build_session(root, cfg, path, model)
    counts = {"prompts": len(session.prompts)}
    stages = [{"stage": "load", "rows_out": len(session.prompts), "seconds": time.perf_counter() - t}]
    t = time.perf_counter()
    recs = train_task(model, train, str(run_dir), session.step, session.prompts, progress)
    stages.append({"stage": "train", "rows_in": len(session.prompts), "rows_out": len(recs),
                   "seconds": time.perf_counter() - t})
    return _finish(model, tok, run_dir, ("loss", "reward", "tokens_per_s"), f"train-grpo {cfg.data}", stages, counts)


def run_sft(sft, train: TrainConfig, data_root=None, progress: bool = True) -> dict:
    return sft_flow(asdict(sft), asdict(train), str(data_root) if data_root else None, progress)


def run_grpo(grpo, train: TrainConfig, data_root=None, progress: bool = True) -> dict:
    return grpo_flow(asdict(grpo), asdict(train), str(data_root) if data_root else None, progress)

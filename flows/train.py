"""The training Prefect flows: `train-sft` (fine-tune on a dataset's trajectories) and
`train-grpo` (GRPO with multi-turn tool rollouts on a dataset's triples).

Tasks: load + tokenize (or load triples), then the training loop as one task (train/
trainer.py: progress bar with step, loss, reward, tokens/s; metrics.jsonl; atomic
checkpoints), then the curves PNG, the final model folder `RUN_DIR/final` and an artifact.
`resume=True` continues from the run folder's latest complete checkpoint after a kill.

With `nproc` > 1 the training task runs `python -m train sft|grpo` in N data-parallel
processes (train/dist.py: torch.distributed.run on this machine, gloo on CPU, nccl on
GPUs); their rank 0 writes metrics, checkpoints, curves and the final model, and the flow
reports from those. The flow process then loads no model itself.

    forgeplay train sft --data demo --out runs/sft1 --max-steps 50
    forgeplay train sft --data demo --out runs/sft1 --max-steps 50 --nproc 2
    forgeplay train grpo --data demo --out runs/grpo1 --max-steps 20 --resume
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NONE

from flows.common import publish_artifact
from storage import resolve_root
from train import stage
from train.trainer import TrainConfig, read_metrics


@task(name="tokenize-trajectories", cache_policy=NONE, retries=1)
def sft_data_task(root: str, sft: dict, tokenizer) -> tuple[list, dict]:
    from train.sft import SFTConfig, load_examples

    cfg = SFTConfig(**sft)
    return load_examples(root, cfg.data, tokenizer, cfg)


@task(name="train-loop", cache_policy=NONE)
def train_task(model, tcfg: dict, run_dir: str, step_fn, examples, loss_weight, progress: bool) -> list[dict]:
    return stage.fit(model, TrainConfig(**tcfg), run_dir, step_fn, examples, loss_weight, progress)


@task(name="train-loop-distributed", cache_policy=NONE)
def launch_task(kind: str, cfg, tcfg: dict, root: str) -> list[dict]:
    """Train in `nproc` processes; returns the metrics records this launch added."""
    from train import checkpoint, dist

    start = 0  # a resumed run restarts after its latest checkpoint (later records are dropped)
    if tcfg["resume"] and (path := checkpoint.latest(cfg.out)) is not None:
        start = int(path.name.split("-")[1])
    dist.launch(kind, [cfg, TrainConfig(**tcfg)], root, tcfg["nproc"])
    return [r for r in read_metrics(cfg.out) if r["step"] > start]


def _summary(kind: str, run_dir: Path, title: str, stages: list, counts: dict, model=None, tok=None) -> dict:
    if model is not None:  # in-process training: write what rank 0 writes under --nproc
        png, final = stage.finish(kind, model, tok, run_dir)
    else:
        png, final = run_dir / "curves.png", run_dir / "final"
        if not (final / "config.json").exists():
            raise RuntimeError(f"the training processes wrote no final model in {final}")
    recs = read_metrics(run_dir)
    summary = {"run_dir": str(run_dir), "final_model": str(final),
               "curves": str(png) if png and Path(png).exists() else None,
               "steps": recs[-1]["step"] if recs else 0, "first": recs[0] if recs else None,
               "last": recs[-1] if recs else None, "counts": counts}
    summary["report"] = publish_artifact(title.split()[0], title, stages, {"data": counts})
    return summary


@flow(name="train-sft", log_prints=True)
def sft_flow(sft: dict, train: dict, data_root: str | None = None, progress: bool = True) -> dict:
    """Fine-tune `sft["model"]` on the trajectories of `sft["data"]` (SFTConfig/TrainConfig fields)."""
    from transformers import AutoTokenizer

    from generators.llm.model_store import resolve_model
    from train import dist
    from train.sft import SFTConfig, make_step

    cfg, root, nproc = SFTConfig(**sft), str(resolve_root(data_root)), train.get("nproc", 1)
    t = time.perf_counter()
    dist.check_nproc(nproc)
    run_dir = stage.prepare_run(cfg, {"sft": sft, "train": train})
    if nproc > 1:  # the ranks load the model; here only the tokenizer, for the counts
        model, path = None, resolve_model(cfg.model)
        tok = AutoTokenizer.from_pretrained(path)
    else:  # with nproc > 1 each rank loads and freezes its own copy (train/stage.py)
        path, tok, model, params = stage.load_sft_model(cfg)
    examples, counts = sft_data_task(root, sft, tok)
    if not examples:
        raise ValueError(f"no trainable trajectories in {cfg.data!r}: {counts}")
    if model is not None:
        counts["trainable_params"], counts["params"] = params["trainable"], params["total"]
    stages = [{"stage": "load + tokenize", "rows_in": counts["rows"], "rows_out": len(examples),
               "seconds": time.perf_counter() - t, "notes": f"model {path}"}]
    t = time.perf_counter()
    if nproc > 1:
        recs = launch_task("sft", cfg, train, root)
    else:
        recs = train_task(model, train, str(run_dir), make_step(tok.pad_token_id), examples,
                          stage.SFT_LOSS_WEIGHT, progress)
    stages.append({"stage": "train", "rows_in": len(examples), "rows_out": len(recs),
                   "seconds": time.perf_counter() - t, "notes": f"{nproc} processes"})
    return _summary("sft", run_dir, f"train-sft {cfg.data}", stages, counts, model, tok)


@flow(name="train-grpo", log_prints=True)
def grpo_flow(grpo: dict, train: dict, data_root: str | None = None, progress: bool = True) -> dict:
    """GRPO on the triples of `grpo["data"]` with tool rollouts (GRPOConfig/TrainConfig fields)."""
    from train import dist
    from train.grpo import GRPOConfig, build_session

    cfg, root, nproc = GRPOConfig(**grpo), str(resolve_root(data_root)), train.get("nproc", 1)
    t = time.perf_counter()
    dist.check_nproc(nproc)
    run_dir = stage.prepare_run(cfg, {"grpo": grpo, "train": train})
    model = tok = session = None
    if nproc > 1:  # each rank builds its own session and rolls out its own prompts
        n = stage.count_prompts(root, cfg)
    else:
        path, tok, model = stage.load_model(cfg.model)
        session = build_session(root, cfg, path, model)
        n = len(session.prompts)
    counts = {"prompts": n}
    stages = [{"stage": "load", "rows_out": n, "seconds": time.perf_counter() - t}]
    t = time.perf_counter()
    if nproc > 1:
        recs = launch_task("grpo", cfg, train, root)
    else:
        recs = train_task(model, train, str(run_dir), session.step, session.prompts,
                          stage.grpo_loss_weight(cfg), progress)
    stages.append({"stage": "train", "rows_in": n, "rows_out": len(recs), "seconds": time.perf_counter() - t,
                   "notes": f"{nproc} processes"})
    return _summary("grpo", run_dir, f"train-grpo {cfg.data}", stages, counts, model, tok)


def run_sft(sft, train: TrainConfig, data_root=None, progress: bool = True) -> dict:
    return sft_flow(asdict(sft), asdict(train), str(data_root) if data_root else None, progress)


def run_grpo(grpo, train: TrainConfig, data_root=None, progress: bool = True) -> dict:
    return grpo_flow(asdict(grpo), asdict(train), str(data_root) if data_root else None, progress)

"""The training Prefect flow `train`: one run of a registered training stage kind (train/
stages.py: `sft` fine-tunes on a dataset's trajectories, `grpo` runs GRPO with multi-turn tool
rollouts on its triples; selfplay/update.py adds the self-play examiner and student updates). Flow runs are named after the kind (train-sft, train-grpo).

One task calls train/run.py `run_stage`, the entry point `python -m train KIND` uses too: load
(or, with `nproc` > 1, count) the data, train (progress bar with step, loss, reward,
tokens/s; metrics.jsonl; atomic checkpoints), then the curves PNG and the final model folder
`RUN_DIR/final`. The flow publishes the stages (rows in and out, seconds) and the data counts
as an artifact. `resume=True` continues from the run folder's latest complete checkpoint.

With `nproc` > 1 the task runs `python -m train KIND` in N data-parallel processes (train/
dist.py: torch.distributed.run on this machine, gloo on CPU, nccl on GPUs); their rank 0
writes metrics, checkpoints, curves and the final model, and the flow reports from those.
The flow process then loads no model itself.

    forgeplay train sft --dataset demo --out runs/sft1 --max-steps 50
    forgeplay train sft --dataset demo --out runs/sft1 --max-steps 50 --nproc 2
    forgeplay train grpo --dataset demo --out runs/grpo1 --max-steps 20 --resume

    run("sft", SFTConfig(data="demo", out="runs/sft1"), TrainConfig(max_steps=50))   # from Python
"""

from __future__ import annotations

from dataclasses import asdict

from flows.common import publish_artifact, tie_temporary_server
from flows.engine import flow, task
from storage import resolve_root
from train.configs import TrainConfig
from train.run import check_stage, run_stage
from train.stages import get_kind


@task(name="train-stage")
def stage_task(kind: str, cfg, tcfg: TrainConfig, root: str, progress: bool) -> dict:
    return run_stage(kind, cfg, tcfg, root, progress)


@flow(name="train", flow_run_name="train-{kind}", log_prints=True)
def train_flow(kind: str, config: dict, train: dict, data_root: str | None = None, progress: bool = True) -> dict:
    """Train stage `kind` with `config` (the kind's config fields) and `train` (TrainConfig fields)."""
    tie_temporary_server()
    cfg = get_kind(kind).config(**config)
    summary = stage_task(kind, cfg, TrainConfig(**train), str(resolve_root(data_root)), progress)
    summary["report"] = publish_artifact(f"train-{kind}", f"train-{kind} {cfg.data}", summary["stages"],
                                         {"data": summary["counts"]})
    return summary


def run(kind: str, cfg, train: TrainConfig, data_root=None, progress: bool = True) -> dict:
    """The flow from config instances, after train/run.py `check_stage` (the options and what
    they name, before a model loads or a Prefect server starts); returns the summary of
    train/run.py plus `report`."""
    check_stage(kind, cfg, train, data_root)
    return train_flow(kind, asdict(cfg), asdict(train), str(data_root) if data_root else None, progress)

"""Self-play Prefect flows. `selfplay`: iterations of π-Play (selfplay/play.py). Unless
`--no-warmstart` (or `--no-train`), a first phase fine-tunes the examiner on the world's
demonstrations (CHECKPOINTS/warmstart; the examiner's KL reference from then on). Per
iteration the examiner builds tasks (filtered by the parser, the task rules and, read by the
student or `--reader`, answerability), the student attempts each `attempts` times, then
(unless `--no-train`) the examiner is updated from how hard its tasks were and the student
from reward plus its EMA teacher's guidance (selfplay/update.py, run as training stages by
the `train` flow's task); the teacher follows the student. Every phase commits its rows to
the output dataset (`tasks`, `rollouts` of both roles, `verdicts` of every examiner output)
or writes its checkpoints (CHECKPOINTS/it<i>/examiner|student, the teacher in
student/teacher) and is then marked done, so `--resume` continues a killed run at its first
phase not done (an update killed after one of its `--checkpoint-every` checkpoints goes on
from it: model, optimizer and the teacher's moving average); the models of an iteration are those the previous updates wrote. The summary
has per iteration the seconds of each phase (examiner generation, filter, attempts, both
updates and the teacher's share of the student's). `--rollout-backend vllm-server` samples
every role from one vLLM server, each role's current weights published to it before it
samples (train.evaluate.OnServer); the updates and the teacher run in this process.
`--demo-tasks`: iteration 0's tasks are drawn from the world's demonstrations instead of
sampled from the examiner (selfplay/phases.py), for an examiner that cannot pose any yet.

`selfplay-warmstart`: the examiner's demonstrations from a world dataset (selfplay/
warmstart.py), committed as `trajectories` (for SFT) and `tasks` (their QCPs) to the
demonstrations dataset, then, with `out`, the examiner fine-tuned on them by the SFT stage
(train/run.py, the same task the `train` flow runs).

The demonstrations of one source dataset share one run id and a demonstration's id is its
triple's, so a rerun (or one asking for more) commits no triple twice; the SFT stage
resumes with `--resume`.

    forgeplay selfplay run --dataset world --examiner runs/examiner0/final --student runs/sft/final --checkpoints runs/sp1
    forgeplay selfplay run --dataset world --examiner runs/examiner0/final --student runs/sft/final --no-train
    forgeplay selfplay warmstart --dataset world --out runs/examiner0 --max-steps 100
    run_warmstart(WarmstartConfig(dataset="world"), TrainConfig(max_steps=100))   # from Python
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict

from flows.common import Stages, require_world, tie_temporary_server
from flows.engine import flow, task
from flows.train import stage_task
from generators.llm.model_store import check_model
from selfplay.loop import (Steps, attempt_phase, commit_demonstrations, demo_phase, examine_phase, iterate,
                           warmstart_configs, warmstart_summary)
from selfplay.play import PlayConfig
from selfplay.warmstart import WarmstartConfig
from storage import resolve_root
from train.configs import SFTConfig, TrainConfig


demos_task = task(name="examiner-demonstrations")(commit_demonstrations)


@flow(name="selfplay-warmstart", log_prints=True)
def warmstart_flow(config: dict, train: dict, data_root: str | None = None, progress: bool = True) -> dict:
    """Demonstrations, then (with `out`) the examiner's SFT on them; the summary of both."""
    tie_temporary_server()
    cfg, root = WarmstartConfig(**config), str(resolve_root(data_root))
    stages = Stages()
    with stages.stage("demonstrations") as st:
        demos = demos_task(cfg, root)
        st.rows_in, st.rows_out = demos["triples"], demos["demonstrations"]
    summary = {"demos": demos, "training": None}
    if cfg.out:
        sft = SFTConfig(data=demos["dataset"], model=cfg.model, out=cfg.out, train_layers=cfg.train_layers)
        summary["training"] = stage_task("sft", sft, TrainConfig(**train), root, progress)
        for row in summary["training"]["stages"]:
            stages.add(row["stage"], **{k: v for k, v in row.items() if k != "stage"})
    summary["report"] = stages.publish("selfplay-warmstart", f"examiner warm-start from {cfg.dataset}",
                                       {"left out": demos["left_out"], "by hop count": demos["by_hop_count"]})
    return summary


def run_warmstart(cfg: WarmstartConfig, train: TrainConfig, data_root=None, progress: bool = True) -> dict:
    """The warm-start flow, after its options and what they name are checked (the world
    dataset, and with --out the model to fine-tune) before a model loads or a server starts."""
    require_world(resolve_root(data_root), cfg.dataset)
    if cfg.out:
        check_model(cfg.model)
    return warmstart_flow(asdict(cfg), asdict(train), str(data_root) if data_root else None, progress)


examine_task = task(name="selfplay-examine")(examine_phase)
demo_task = task(name="selfplay-demo-tasks")(demo_phase)
attempt_task = task(name="selfplay-attempt")(attempt_phase)


def _warmstart(cfg: PlayConfig, root: str, progress: bool) -> dict:
    """The examiner's warm-start before iteration 0: the `selfplay-warmstart` flow."""
    ws, tcfg = warmstart_configs(cfg)
    return warmstart_summary(ws, warmstart_flow(asdict(ws), asdict(tcfg), root, progress))


@flow(name="selfplay", log_prints=True)
def selfplay_flow(config: dict, data_root: str | None = None, progress: bool = True) -> dict:
    """Self-play iterations (selfplay/loop.py), each phase a task, each update a training
    stage run by the `train` flow's task."""
    tie_temporary_server()
    cfg, root = PlayConfig(**config), str(resolve_root(data_root))
    stages = Stages()
    steps = Steps(warmstart=_warmstart, demo=demo_task, examine=examine_task, attempt=attempt_task,
                  train=stage_task, timed=stages.stage)
    out = iterate(cfg, root, progress, steps)
    rejects = sum((Counter(s["rejects"]) for s in out["iterations"]), Counter())
    report = stages.publish("selfplay", f"self-play {out['run_id']} on {cfg.dataset}", {"examiner rejects": dict(rejects)})
    return {**out, "report": report}


def run_selfplay(cfg: PlayConfig, data_root=None, progress: bool = True) -> dict:
    """The self-play flow, after its options and what they name are checked (the world
    dataset, the models of the roles) before a model loads or a server starts."""
    cfg.check()
    require_world(resolve_root(data_root), cfg.dataset)
    for option, model in (("--examiner", cfg.examiner), ("--student", cfg.student), ("--reader", cfg.reader)):
        check_model(model, option)
    return selfplay_flow(asdict(cfg), str(data_root) if data_root else None, progress)

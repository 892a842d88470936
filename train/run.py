"""The one way to run a training stage of any registered kind (train/stages.py): check the
process count, then either launch N data-parallel ranks (`--nproc N` outside torchrun: `python
-m train KIND` under torch.distributed.run, train/dist.py) or build and train in this process
(alone, or as one rank under torchrun): build, make the memory plan (train/memory.py: print the
expected peak, decide activation checkpointing, stop with one line when it cannot fit, before
anything is written), write the run folder's config.json, train, write the curves and the
final model on rank 0, remove the checkpoints (unless `keep_checkpoints`) and tear the process
group down. `resume` continues from the run folder's latest complete checkpoint
(train/trainer.py).

    summary = run_stage("sft", SFTConfig(data="demo", out="runs/s1"), TrainConfig(max_steps=50))
    summary["final_model"], summary["last"]["loss"], summary["stages"]

`python -m train KIND` (train/__main__.py) and the Prefect flow `train` (flows/train.py,
`forgeplay train KIND`) both call `run_stage`. The summary: run_dir, final_model, curves,
steps, first and last metrics records, counts, `stages` (name, rows in and out, seconds, notes
of the load and train stages, for the flow's report) and `memory_plan` (GB per part, the peak,
the limit, whether checkpointing is on; None for a kind without a workload) and `warnings` (the
build's: GRPO from a model trained on longer turns than its rollouts may take; when ranks are
launched, rank 0 prints them and records them in the run folder's config.json, where the
launcher reads them).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path

from storage.configcli import option_of
from storage.files import write_json
from storage.runs import Stages
from train.configs import TrainConfig
from train.stages import StageKind, get_kind


def check_args(cfg) -> None:
    if not cfg.data or not cfg.out:
        raise ValueError(f"{option_of(cfg, 'data')} and --out are required")


def check_stage(kind: str, cfg, tcfg: TrainConfig, data_root=None) -> None:
    """What a stage's options can tell wrong before a model loads or a process starts
    (one-line ValueError): the kind, --dataset and --out, the process count, options wrong
    together (the kind's `check`), rows of what the kind trains on (`reads`) in --dataset and a
    --model that is a model folder or a prepared name."""
    from generators.llm.model_store import check_model
    from storage import resolve_root
    from storage.reader import require_rows

    stage = get_kind(kind)
    check_args(cfg)
    if tcfg.nproc < 1:
        raise ValueError(f"--nproc must be >= 1, not {tcfg.nproc}")
    from train.memory import check_shard

    check_shard(tcfg.shard)
    if tcfg.nproc > 1:
        from train import dist  # imports torch: counts the GPUs

        dist.check_nproc(tcfg.nproc)
    if stage.one_process and tcfg.nproc > 1:
        raise ValueError(f"training stage {kind} runs in one process (--nproc 1), not {tcfg.nproc}")
    if stage.check is not None:
        stage.check(cfg, tcfg)
    if stage.reads:
        require_rows(resolve_root(data_root), cfg.data, stage.reads, option_of(cfg, "data"))
    check_model(cfg.model)


def prepare_run(kind: str, cfg, tcfg: TrainConfig, warnings: list[str] | None = None) -> Path:
    """Check --dataset/--out, create the run folder and write the resolved config.json (with the
    build's `warnings`)."""
    check_args(cfg)
    run_dir = Path(cfg.out)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / "config.json", {kind: asdict(cfg), "train": asdict(tcfg), "warnings": list(warnings or [])})
    return run_dir


def run_stage(kind: str, cfg, tcfg: TrainConfig, data_root=None, progress: bool = True) -> dict:
    """Train stage `kind` with its config `cfg` (module docstring; `check_stage` first); returns
    the summary. Raises dist.LaunchFailed when a rank of a launched multi-process run fails."""
    from storage import resolve_root

    stage, root = get_kind(kind), resolve_root(data_root)
    check_stage(kind, cfg, tcfg, root)
    if "WORLD_SIZE" in os.environ:  # a rank under torchrun: the process count is torchrun's
        return _train_here(stage, cfg, replace(tcfg, nproc=int(os.environ["WORLD_SIZE"])), root, progress)
    if tcfg.nproc > 1:
        return _launch(stage, cfg, tcfg, root)
    return _train_here(stage, cfg, tcfg, root, progress)


def _launch(stage: StageKind, cfg, tcfg: TrainConfig, root) -> dict:
    """Count the rows here (no model), train in `tcfg.nproc` ranks, report from what rank 0 wrote."""
    from train import checkpoint, dist
    from train.trainer import read_metrics

    check_args(cfg)  # rank 0 writes the run folder once its memory plan passes
    run_dir, stages = Path(cfg.out), Stages()
    with stages.stage("load", notes="counted; each rank loads the model") as st:
        n, counts = stage.count(root, cfg) if stage.count else (None, {})
        st.rows_in, st.rows_out = counts.get("rows"), n
    start = 0  # a resumed run restarts after its latest checkpoint (later records are dropped)
    if tcfg.resume and (path := checkpoint.latest(run_dir)) is not None:
        start = int(path.name.split("-")[1])
    with stages.stage("train", rows_in=n, notes=f"{tcfg.nproc} processes") as st:
        dist.launch(stage.name, [cfg, tcfg], root, tcfg.nproc, stage.module)
        st.rows_out = len([r for r in read_metrics(run_dir) if r["step"] > start])
    final = run_dir / "final"
    if not (final / "config.json").exists():
        raise RuntimeError(f"the training processes wrote no final model in {final}")
    warnings = json.loads((run_dir / "config.json").read_text()).get("warnings")  # rank 0's build's
    return _summary(run_dir, final, run_dir / "curves.png", counts, stages, warnings=warnings)


def _train_here(stage: StageKind, cfg, tcfg: TrainConfig, root, progress: bool) -> dict:
    """Build and train in this process (one rank's share under torchrun); rank 0 writes the
    config, curves and final model. A failing rank prints one line the launcher reports."""
    from train import checkpoint, dist
    from train.sft import save_final
    from train.shard import full_state_dict
    from train.trainer import Trainer, plot_metrics

    under_torchrun, rank = "WORLD_SIZE" in os.environ, int(os.environ.get("RANK", "0"))
    run_dir, png, final, stages = Path(cfg.out), None, None, Stages()
    try:
        device = dist.init_from_env(one_rank=tcfg.shard != "none")
        check_args(cfg)
        plan = None
        with stages.stage("load") as st:
            built = stage.build(cfg, tcfg, root, device)
            st.rows_in, st.rows_out, st.notes = built.counts.get("rows"), len(built.data), built.notes
            if built.workload is not None:
                plan = plan_memory(built, tcfg, device, rank)
                st.notes += "; " + plan.line()
        if rank == 0:
            run_dir = prepare_run(stage.name, cfg, tcfg, built.warnings)
        with stages.stage("train", rows_in=len(built.data), notes=f"{tcfg.nproc} processes") as st:
            trainer = Trainer(built.model, tcfg, run_dir, built.step, loss_weight=built.loss_weight,
                              lengths=built.lengths, extras=built.extras, kinds=built.kinds, frozen=built.frozen)
            if built.on_trainer is not None:
                built.on_trainer(trainer)
            st.rows_out = len(trainer.fit(built.data, progress=progress))
        weights = full_state_dict(built.model) if trainer.sharded else None  # a collective: every rank
        if rank == 0:
            png, final = plot_metrics(run_dir, stage.curves), save_final(built.model, built.tokenizer, run_dir,
                                                                        built.counts.get("longest_turn"), weights)
            if not tcfg.keep_checkpoints:  # the final model stays; the optimizer state of each step goes
                checkpoint.prune(run_dir)
    except BaseException as e:
        if under_torchrun and not isinstance(e, (SystemExit, KeyboardInterrupt)):
            print(dist.rank_error_line(e), file=sys.stderr, flush=True)
        raise
    finally:
        dist.teardown()
    return _summary(run_dir, final, png, built.counts, stages, rank, plan.as_dict() if plan else None, built.warnings)


def plan_memory(built, tcfg: TrainConfig, device, rank: int):
    """Make the memory plan of `built` (train/memory.py), print it on rank 0, stop with
    MemoryPlanError when it cannot fit, switch checkpointing as planned; returns the plan."""
    from train.memory import make_plan

    plan = make_plan(built.model, built.workload, tcfg, device)
    line = plan.line()
    if rank == 0:
        print(line, flush=True)
    plan.check()
    plan.apply(built.model)
    if built.on_plan is not None:
        built.on_plan(plan)
    return plan


def _summary(run_dir: Path, final, png, counts: dict, stages: Stages, rank: int = 0, plan=None,
             warnings: list[str] | None = None) -> dict:
    from train.trainer import read_metrics

    recs = read_metrics(run_dir)
    return {"run_dir": str(run_dir), "final_model": str(final) if final else None,
            "curves": str(png) if png and Path(png).exists() else None,
            "steps": recs[-1]["step"] if recs else 0, "first": recs[0] if recs else None,
            "last": recs[-1] if recs else None, "counts": counts, "stages": stages.as_dicts(), "rank": rank,
            "memory_plan": plan, "warnings": list(warnings or [])}

"""Self-play Prefect flows. `selfplay`: iterations of the examiner building tasks and the
student attempting them (selfplay/play.py), each phase committed to the output dataset
(`tasks`, `rollouts` of both roles, `verdicts` of every examiner output) and then marked
done, so `--resume` continues a killed run at its first phase not done; the examiner and
student updates are not built yet (`--no-train` only).

`selfplay-warmstart`: the examiner's demonstrations from a world dataset (selfplay/
warmstart.py), committed as `trajectories` (for SFT) and `tasks` (their QCPs) to the
demonstrations dataset, then, with `out`, the examiner fine-tuned on them by the SFT stage
(train/run.py, the same task the `train` flow runs).

The demonstrations of one source dataset share one run id and a demonstration's id is its
triple's, so a rerun (or one asking for more) commits no triple twice; the SFT stage
resumes with `--resume`.

    forgeplay selfplay run --dataset world --examiner runs/examiner0/final --student runs/sft/final --no-train
    forgeplay selfplay warmstart --dataset world --out runs/examiner0 --max-steps 100
    run_warmstart(WarmstartConfig(dataset="world"), TrainConfig(max_steps=100))   # from Python
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict

from prefect import flow, task
from prefect.cache_policies import NONE

from flows.common import Stages
from flows.train import stage_task
from selfplay.play import PlayConfig, attempt, examine, score
from selfplay.warmstart import WarmstartConfig, demonstrations, examiner_tool
from storage import load_table, resolve_root
from storage.resumable import RunWriter
from storage.runs import config_hash, read_run, save_run_config
from train.configs import SFTConfig, TrainConfig


@task(name="examiner-demonstrations", cache_policy=NONE)
def demos_task(cfg: WarmstartConfig, root: str) -> dict:
    """Build the demonstrations and commit them; counts of what was made and left out."""
    from generators.synth.synthesize import load_inputs
    from generators.tools.base import base_rows
    from generators.tools.simulator import Simulator

    inputs = load_inputs(root, cfg.dataset)
    tools = base_rows()
    sim = Simulator(inputs.documents, seed=cfg.draw_seed, tools=tools)
    demos, skipped = demonstrations(inputs.documents, inputs.triples, sim, examiner_tool(tools), hop_mix=cfg.hop_mix, n=cfg.n,
                                    seed=cfg.draw_seed, dataset=cfg.dataset)
    if not demos:
        raise ValueError(f"no triple of {cfg.dataset!r} makes a demonstration (left out: {dict(skipped)})")
    # one run per source dataset: a demonstration's id is its triple's, so any later call (more
    # demonstrations, another mix) adds only triples not demonstrated yet
    identity = {"dataset": cfg.dataset}
    writer = RunWriter(root, f"warmstart-{config_hash(identity)}", {"config_hash": config_hash(identity)})
    ds = cfg.demos_dataset()
    new = writer.commit(ds, "trajectories", [d["trajectory"] for d in demos])
    writer.commit(ds, "tasks", [d["task"] for d in demos])
    hops = Counter(d["task"]["hop_count"] for d in demos)
    return {"dataset": ds, "demonstrations": len(demos), "committed_now": new, "by_hop_count": dict(sorted(hops.items())),
            "left_out": dict(sorted(skipped.items())), "triples": len(inputs.triples)}


@flow(name="selfplay-warmstart", log_prints=True)
def warmstart_flow(config: dict, train: dict, data_root: str | None = None, progress: bool = True) -> dict:
    """Demonstrations, then (with `out`) the examiner's SFT on them; the summary of both."""
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
    return warmstart_flow(asdict(cfg), asdict(train), str(data_root) if data_root else None, progress)


def _phase_done(root: str, ds: str, phase_run: str) -> dict | None:
    """The record of a completed phase (written after its commits), or None."""
    try:
        return read_run(root, ds, phase_run)
    except FileNotFoundError:
        return None


@task(name="selfplay-examine", cache_policy=NONE)
def examine_task(examiner, sim, documents: list, tools: list, cfg: PlayConfig, run: str, it: int, root: str,
                 progress: bool) -> dict:
    """The examiner's outputs of iteration `it`, committed: rollouts, verdicts, then tasks."""
    outs = examine(examiner, sim, documents, tools, cfg, run, it, progress)
    writer, ds = RunWriter(root, f"{run}-it{it}-examine", {"config_hash": run}), cfg.out_dataset()
    writer.commit(ds, "rollouts", [o["rollout"] for o in outs])
    writer.commit(ds, "verdicts", [o["verdict"] for o in outs])
    tasks = [o["task"] for o in outs if o["task"]]
    if tasks:
        writer.commit(ds, "tasks", tasks)
    reasons = Counter(o["reason"] for o in outs if o["reason"])
    return {"examiner_outputs": len(outs), "tasks": len(tasks), "rejects": dict(sorted(reasons.items()))}


@task(name="selfplay-attempt", cache_policy=NONE)
def attempt_task(student, sim, tools: list, cfg: PlayConfig, run: str, it: int, root: str, progress: bool) -> dict:
    """The student's attempts at iteration `it`'s committed tasks, committed; k per task."""
    ds = cfg.out_dataset()
    tasks = sorted(load_table(ds, "tasks", root, run_id=f"{run}-it{it}-examine").to_pylist(), key=lambda t: t["task_id"])
    rows = attempt(student, sim, tasks, tools, cfg, run, it, progress) if tasks else []
    if rows:
        RunWriter(root, f"{run}-it{it}-attempt", {"config_hash": run}).commit(ds, "rollouts", rows)
    scores = score(tasks, rows, cfg.attempts)
    return {"attempts": len(rows), "scores": scores,
            "student_em": sum(json.loads(r["meta"])["em"] for r in rows) / len(rows) if rows else None}


@flow(name="selfplay", log_prints=True)
def selfplay_flow(config: dict, data_root: str | None = None, progress: bool = True) -> dict:
    """Self-play iterations (selfplay/play.py): per iteration the examine phase, then the
    attempt phase, each committed and then marked done, so `resume` skips what is done."""
    from generators.llm.transformers_backend import TransformersBackend
    from generators.synth.synthesize import load_inputs
    from generators.tools.base import base_rows
    from generators.tools.simulator import Simulator

    cfg, root = PlayConfig(**config), str(resolve_root(data_root))
    cfg.check()
    ds = cfg.out_dataset()
    run = f"selfplay-{config_hash({k: v for k, v in asdict(cfg).items() if k not in ('resume', 'iterations', 'out')})}"
    phases = [(it, p) for it in range(cfg.iterations) for p in ("examine", "attempt")]
    done = {ph: rec for ph in phases if (rec := _phase_done(root, ds, f"{run}-it{ph[0]}-{ph[1]}"))}
    if done and not cfg.resume:
        raise ValueError(f"run {run} already completed {len(done)} phase(s) in {ds}; --resume continues it")
    inputs = load_inputs(root, cfg.dataset)
    tools = base_rows()
    sim = Simulator(inputs.documents, seed=cfg.seed, tools=tools)
    models: dict = {}

    def model(role: str):
        if role not in models:
            models[role] = TransformersBackend(getattr(cfg, role), batch_size=cfg.batch_size)
        return models[role]

    stages, iterations = Stages(), []
    try:
        for it in range(cfg.iterations):
            summary = {"iteration": it}
            for phase in ("examine", "attempt"):
                if (it, phase) in done:
                    summary.update(done[(it, phase)]["summary"])
                    continue
                with stages.stage(f"iteration {it}: {phase}") as st:
                    if phase == "examine":
                        out = examine_task(model("examiner"), sim, inputs.documents, tools, cfg, run, it, root, progress)
                        st.rows_in, st.rows_out = out["examiner_outputs"], out["tasks"]
                    else:
                        out = attempt_task(model("student"), sim, tools, cfg, run, it, root, progress)
                        st.rows_in, st.rows_out = summary.get("tasks"), out["attempts"]
                save_run_config(root, ds, f"{run}-it{it}-{phase}", cfg, extra={"summary": out})
                summary.update(out)
            iterations.append(summary)
    finally:
        for m in models.values():
            m.close()
    rejects = sum((Counter(s["rejects"]) for s in iterations), Counter())
    report = stages.publish("selfplay", f"self-play {run} on {cfg.dataset}", {"examiner rejects": dict(rejects)})
    return {"run_id": run, "dataset": ds, "iterations": iterations, "skipped_phases": len(done), "report": report}


def run_selfplay(cfg: PlayConfig, data_root=None, progress: bool = True) -> dict:
    cfg.check()  # a bad option fails before Prefect starts
    return selfplay_flow(asdict(cfg), str(data_root) if data_root else None, progress)

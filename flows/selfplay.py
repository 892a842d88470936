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

import json
import time
from collections import Counter
from dataclasses import asdict

from flows.common import Stages, require_world, tie_temporary_server
from flows.engine import flow, task
from flows.train import stage_task
from generators.llm.model_store import check_model
from selfplay.phases import commit_examine, commit_replayed, demonstrated
from selfplay.play import PlayConfig, attempt, examine, phase_run, run_id, score
from selfplay.warmstart import WarmstartConfig, demonstrations, examiner_tool
from storage import load_table, resolve_root
from storage.resumable import RunWriter
from storage.runs import config_hash, read_run, save_run_config, without_later_defaults
from train.configs import SFTConfig, TrainConfig


@task(name="examiner-demonstrations")
def demos_task(cfg: WarmstartConfig, root: str) -> dict:
    """Build the demonstrations and commit them; counts of what was made and left out."""
    from generators.synth.synthesize import load_inputs
    from generators.tools.base import base_rows
    from generators.tools.retriever import index_dir
    from generators.tools.simulator import Simulator

    inputs = load_inputs(root, cfg.dataset)
    tools = base_rows()
    sim = Simulator(inputs.documents, seed=cfg.draw_seed, tools=tools, retriever=cfg.retriever,
                    index_dir=index_dir(root))
    demos, skipped = demonstrations(inputs.documents, inputs.triples, sim, examiner_tool(tools), hop_mix=cfg.hop_mix, n=cfg.n,
                                    seed=cfg.draw_seed, dataset=cfg.dataset, top_k=cfg.top_k)
    if not demos:
        raise ValueError(f"no triple of {cfg.dataset!r} makes a demonstration (left out: {dict(skipped)})")
    # one run per source dataset: a demonstration's id is its triple's, so any later call (more
    # demonstrations, another mix) adds only triples not demonstrated yet
    identity = without_later_defaults({"dataset": cfg.dataset, "top_k": cfg.top_k}, {"top_k": 0})
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


def _phase_done(root: str, ds: str, phase_run: str) -> dict | None:
    """The record of a completed phase (written after its commits), or None."""
    try:
        return read_run(root, ds, phase_run)
    except FileNotFoundError:
        return None


@task(name="selfplay-examine")
def examine_task(examiner, sim, documents: list, tools: list, cfg: PlayConfig, run: str, it: int, root: str,
                 progress: bool, reader=None) -> dict:
    """The examiner's outputs of iteration `it`, filtered (with `reader`, answerability too)
    and committed: rollouts, verdicts, then tasks."""
    timings: dict = {}
    outs = examine(examiner, sim, documents, tools, cfg, run, it, progress, timings, reader=reader)
    return {**commit_examine(root, cfg, run, it, outs), **timings}


@task(name="selfplay-demo-tasks")
def demo_task(sim, inputs, tools: list, cfg: PlayConfig, run: str, root: str) -> dict:
    """`--demo-tasks`: iteration 0's tasks from the world's demonstrations, committed as the
    examine phase's outputs."""
    started = time.perf_counter()
    convs = demonstrated(cfg, inputs.documents, inputs.triples, sim, tools)
    return {**commit_replayed(root, cfg, run, 0, convs, inputs.documents),
            "generation_s": time.perf_counter() - started}


@task(name="selfplay-attempt")
def attempt_task(student, sim, tools: list, cfg: PlayConfig, run: str, it: int, root: str, progress: bool) -> dict:
    """The student's attempts at iteration `it`'s committed tasks, committed; k per task."""
    ds = cfg.out_dataset()
    tasks = sorted(load_table(ds, "tasks", root, run_id=phase_run(run, it, "examine")).to_pylist(), key=lambda t: t["task_id"])
    started = time.perf_counter()
    rows = attempt(student, sim, tasks, tools, cfg, run, it, progress) if tasks else []
    seconds = time.perf_counter() - started
    if rows:
        RunWriter(root, phase_run(run, it, "attempt"), {"config_hash": run}).commit(ds, "rollouts", rows)
    scores = score(tasks, rows, cfg.attempts)
    return {"attempts": len(rows), "scores": scores, "attempts_s": seconds,
            "student_em": sum(json.loads(r["meta"])["em"] for r in rows) / len(rows) if rows else None}


def _warmstart(cfg: PlayConfig, root: str, progress: bool) -> dict:
    """The examiner's warm-start before iteration 0: the `selfplay-warmstart` flow (the
    world's demonstrations, committed to <dataset>_examiner, then SFT of `cfg.examiner`)."""
    import shutil

    from train.trainer import read_metrics

    ws = WarmstartConfig(dataset=cfg.dataset, hop_mix=cfg.hop_mix, draw_seed=cfg.seed, model=cfg.examiner,
                         out=f"{cfg.checkpoints}/warmstart", train_layers=cfg.train_layers)
    shutil.rmtree(ws.out, ignore_errors=True)  # killed before it was marked done: start over
    tcfg = TrainConfig(max_steps=cfg.warmstart_steps, batch_size=cfg.update_batch, lr=cfg.warmstart_lr,
                       checkpoint_every=0, seed=cfg.seed)
    s = warmstart_flow(asdict(ws), asdict(tcfg), root, progress)
    trained = s["training"]
    return {"examiner_model": trained["final_model"], "warmstart_demos": s["demos"]["demonstrations"],
            "warmstart_loss": [trained["first"]["loss"], trained["last"]["loss"]],
            "warmstart_s": sum(r["seconds"] for r in read_metrics(ws.out))}


def _update(kind: str, cfg: PlayConfig, it: int, run: str, model: str | None, root: str, progress: bool,
            **extra) -> dict:
    """Run one self-play update stage (selfplay/update.py) on iteration `it`; its summary."""
    import shutil

    from selfplay.update import ExaminerUpdateConfig, StudentUpdateConfig, learns
    from train.trainer import read_metrics

    from train.checkpoint import latest

    role = kind.split("-")[1]
    out = f"{cfg.checkpoints}/it{it}/{role}"
    resume = cfg.checkpoint_every > 0 and latest(out) is not None  # killed after a checkpoint: go on from it
    if not resume:
        shutil.rmtree(out, ignore_errors=True)  # a phase killed before it was marked done starts over
    config = ExaminerUpdateConfig if role == "examiner" else StudentUpdateConfig
    stage = config(data=cfg.out_dataset(), run=run, iteration=it, model=model, out=out,
                   train_layers=cfg.train_layers, **extra)
    if not learns(kind, stage, root):  # every advantage 0 and no teacher: the role stays as it is
        return {f"{role}_update": "nothing to learn"}
    steps = cfg.examiner_steps if role == "examiner" else cfg.student_steps
    tcfg = TrainConfig(max_steps=steps, batch_size=cfg.update_batch, lr=cfg.lr, schedule="constant",
                       checkpoint_every=cfg.checkpoint_every, resume=resume,
                       seed=cfg.seed * 31 + it)  # a few steps each iteration: no decay
    summary = stage_task(kind, stage, tcfg, root, progress)
    metrics = read_metrics(out)
    out_row = {f"{role}_model": summary["final_model"], f"{role}_loss": summary["last"]["loss"],
               f"{role}_update_s": sum(r["seconds"] for r in metrics)}
    out_row[f"{role}_steps"] = len(metrics)
    if role == "examiner" and any("demo_nll" in r for r in metrics):  # replayed demonstrations, by likelihood
        out_row["examiner_demo_nll"] = sum(r["demo_nll"] for r in metrics) / len(metrics)
    if role == "student" and extra.get("distill_coef"):
        out_row["teacher_model"] = f"{out}/teacher"
        out_row["teacher_s"] = sum(r.get("teacher_s", 0.0) for r in metrics)
        out_row["teacher_kl"] = sum(r.get("teacher_kl", 0.0) for r in metrics) / len(metrics)  # the distillation term
    return out_row


@flow(name="selfplay", log_prints=True)
def selfplay_flow(config: dict, data_root: str | None = None, progress: bool = True) -> dict:
    """Self-play iterations (selfplay/play.py): per iteration the examine and attempt phases,
    then (unless `train` is off) the examiner's and the student's updates, each committed and
    then marked done, so `resume` skips what is done; each phase's model is the one the
    previous update of its role wrote."""
    tie_temporary_server()
    from generators.llm.transformers_backend import TransformersBackend
    from generators.synth.synthesize import load_inputs
    from generators.tools.banks import bank_rows
    from generators.tools.base import base_rows
    from generators.tools.retriever import index_dir
    from generators.tools.simulator import Simulator
    from train.evaluate import OnServer, sampling_backend

    cfg, root = PlayConfig(**config), str(resolve_root(data_root))
    cfg.check()
    ds = cfg.out_dataset()
    run = run_id(cfg, root)
    names = ("examine", "attempt") + (("examiner-update", "student-update") if cfg.train else ())
    first = ("warmstart",) if cfg.train and cfg.warmstart else ()
    phases = [(it, p) for it in range(cfg.iterations) for p in (first if it == 0 else ()) + names]
    done = {ph: rec for ph in phases if (rec := _phase_done(root, ds, phase_run(run, *ph)))}
    if done and not cfg.resume:
        raise ValueError(f"run {run} already completed {len(done)} phase(s) in {ds}; --resume continues it")
    inputs = load_inputs(root, cfg.dataset)
    tools = bank_rows(cfg.tools, inputs.documents, base_rows)  # auto: the corpus's own for an imported corpus
    sim = Simulator(inputs.documents, seed=cfg.seed, tools=tools, retriever=cfg.retriever, index_dir=index_dir(root))
    current = {"examiner": cfg.examiner, "student": cfg.student, "teacher": None, "reader": cfg.reader}
    lambdas = cfg.lambdas() if cfg.train else []
    reference = cfg.examiner
    backends: dict = {}
    served: list = []  # --rollout-backend vllm-server: the one server every role samples from

    def backend(role: str):  # the rollout backend of the role's current weights
        if cfg.rollout_backend == "vllm-server":
            if not served:
                served.append(sampling_backend("vllm-server", current[role], url=cfg.rollout_url))
            return OnServer(served[0], current[role])
        key = (role, current[role])
        if key not in backends:
            for old in [k for k in backends if k[0] == role]:
                backends.pop(old).close()
            backends[key] = TransformersBackend(current[role], batch_size=cfg.batch_size)
        return backends[key]

    stages, iterations = Stages(), []
    try:
        for it in range(cfg.iterations):
            summary = {"iteration": it}
            for phase in (first if it == 0 else ()) + names:
                if (it, phase) in done:
                    out = done[(it, phase)]["summary"]
                else:
                    with stages.stage(f"iteration {it}: {phase}") as st:
                        if phase == "warmstart":
                            out = _warmstart(cfg, root, progress)
                        elif phase == "examine" and it == 0 and cfg.demo_tasks:
                            out = demo_task(sim, inputs, tools, cfg, run, root)
                            st.rows_in, st.rows_out = out["examiner_outputs"], out["tasks"]
                        elif phase == "examine":
                            reader = backend("reader" if cfg.reader else "student") if cfg.answerability else None
                            out = examine_task(backend("examiner"), sim, inputs.documents, tools, cfg, run, it, root,
                                               progress, reader=reader)
                            st.rows_in, st.rows_out = out["examiner_outputs"], out["tasks"]
                        elif phase == "attempt":
                            out = attempt_task(backend("student"), sim, tools, cfg, run, it, root, progress)
                            st.rows_in, st.rows_out = summary.get("tasks"), out["attempts"]
                        elif phase == "examiner-update":
                            out = _update("selfplay-examiner", cfg, it, run, current["examiner"], root, progress,
                                          reference=reference, kl_coef=cfg.kl_coef)
                        else:
                            out = _update("selfplay-student", cfg, it, run, current["student"], root, progress,
                                          teacher=current["teacher"], distill_coef=lambdas[it],
                                          teacher_context=cfg.teacher_context, tau=cfg.tau)
                        st.notes = out.get(f"{phase.split('-')[0]}_update", "")
                    save_run_config(root, ds, phase_run(run, it, phase), cfg, extra={"summary": out})
                summary.update(out)
                for role in current:  # the next phases use what the updates wrote
                    current[role] = out.get(f"{role}_model", current[role])
                if phase == "warmstart":  # the examiner's KL holds it near what it started self-play as
                    reference = current["examiner"]
            iterations.append(summary)
    finally:
        for b in [*backends.values(), *served]:
            b.close()
    rejects = sum((Counter(s["rejects"]) for s in iterations), Counter())
    report = stages.publish("selfplay", f"self-play {run} on {cfg.dataset}", {"examiner rejects": dict(rejects)})
    return {"run_id": run, "dataset": ds, "iterations": iterations, "skipped_phases": len(done), "report": report,
            "models": dict(current)}


def run_selfplay(cfg: PlayConfig, data_root=None, progress: bool = True) -> dict:
    """The self-play flow, after its options and what they name are checked (the world
    dataset, the models of the roles) before a model loads or a server starts."""
    cfg.check()
    require_world(resolve_root(data_root), cfg.dataset)
    for option, model in (("--examiner", cfg.examiner), ("--student", cfg.student), ("--reader", cfg.reader)):
        check_model(model, option)
    return selfplay_flow(asdict(cfg), str(data_root) if data_root else None, progress)

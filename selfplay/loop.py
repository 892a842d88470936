"""The self-play iterations as an algorithm; flows/selfplay.py runs them as a Prefect flow,
each phase a task. This module decides which phases run in which order (per iteration
examine and attempt, then unless `--no-train` the examiner's and the student's updates; a
warm-start first with `--warmstart`), which model each role samples from (the one the last
update of its role wrote), the rollout backend of each role (an in-process model per role's
current weights, or one vLLM server every role publishes its weights to before it samples)
and resume: a phase is marked done once its rows or checkpoints are written, and a rerun
with `--resume` skips what is done.

    steps = Steps(warmstart=..., demo=..., examine=..., attempt=..., train=..., timed=...)
    summary = iterate(cfg, root, progress, steps)   # run_id, dataset, iterations, models, ...

`Steps` are what the caller runs each phase with (the flow passes its tasks, which call the
`*_phase` functions below, and its stage timer); nothing here imports Prefect.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

from selfplay.phases import commit_examine, commit_replayed, demonstrated
from selfplay.play import PlayConfig, attempt, examine, phase_run, run_id, score
from selfplay.warmstart import WarmstartConfig, demonstrations, examiner_tool
from storage import load_table
from storage.resumable import RunWriter
from storage.runs import config_hash, read_run, save_run_config, without_later_defaults
from train.configs import TrainConfig

ROUNDS = ("examine", "attempt")
UPDATES = ("examiner-update", "student-update")


@dataclass
class Steps:
    """How the phases run (module docstring): each a callable taking what its `*_phase`
    function takes; `train(kind, stage config, TrainConfig, root, progress)` runs a training
    stage; `timed(name)` is a context manager yielding a row with rows_in, rows_out, notes."""

    warmstart: Callable[[PlayConfig, str, bool], dict]
    demo: Callable[..., dict]
    examine: Callable[..., dict]
    attempt: Callable[..., dict]
    train: Callable[[str, Any, TrainConfig, str, bool], dict]
    timed: Callable[[str], ContextManager]


def phases(cfg: PlayConfig) -> list[tuple[int, str]]:
    """(iteration, phase) in the order they run."""
    names = ROUNDS + (UPDATES if cfg.train else ())
    first = ("warmstart",) if cfg.train and cfg.warmstart else ()
    return [(it, p) for it in range(cfg.iterations) for p in (first if it == 0 else ()) + names]


def completed(root: str, cfg: PlayConfig, run: str) -> dict:
    """(iteration, phase) -> the record of each phase already done (written after its commits)."""
    done = {}
    for ph in phases(cfg):
        try:
            done[ph] = read_run(root, cfg.out_dataset(), phase_run(run, *ph))
        except FileNotFoundError:
            pass
    return done


class Roles:
    """The model each role (examiner, student, teacher, reader) samples from now, the
    examiner's KL reference, and the rollout backends of their current weights."""

    def __init__(self, cfg: PlayConfig) -> None:
        self.cfg = cfg
        self.current = {"examiner": cfg.examiner, "student": cfg.student, "teacher": None, "reader": cfg.reader}
        self.reference = cfg.examiner
        self._backends: dict = {}
        self._served: list = []  # --rollout-backend vllm-server: the one server every role samples from

    def backend(self, role: str):
        """The rollout backend of `role`'s current weights (an earlier one of the role is closed)."""
        from generators.llm.transformers_backend import TransformersBackend
        from train.evaluate import OnServer, sampling_backend

        if self.cfg.rollout_backend == "vllm-server":
            if not self._served:
                self._served.append(sampling_backend("vllm-server", self.current[role], url=self.cfg.rollout_url))
            return OnServer(self._served[0], self.current[role])
        key = (role, self.current[role])
        if key not in self._backends:
            for old in [k for k in self._backends if k[0] == role]:
                self._backends.pop(old).close()
            self._backends[key] = TransformersBackend(self.current[role], batch_size=self.cfg.batch_size)
        return self._backends[key]

    def take(self, phase: str, out: dict) -> None:
        """What a phase wrote becomes the roles' models; a warm-started examiner its KL reference."""
        for role in self.current:
            self.current[role] = out.get(f"{role}_model", self.current[role])
        if phase == "warmstart":
            self.reference = self.current["examiner"]

    def close(self) -> None:
        for b in [*self._backends.values(), *self._served]:
            b.close()


def examine_phase(examiner, sim, documents: list, tools: list, cfg: PlayConfig, run: str, it: int, root: str,
                  progress: bool, reader=None) -> dict:
    """The examiner's outputs of iteration `it`, filtered (with `reader`, answerability too)
    and committed: rollouts, verdicts, then tasks."""
    timings: dict = {}
    outs = examine(examiner, sim, documents, tools, cfg, run, it, progress, timings, reader=reader)
    return {**commit_examine(root, cfg, run, it, outs), **timings}


def demo_phase(sim, inputs, tools: list, cfg: PlayConfig, run: str, root: str) -> dict:
    """`--demo-tasks`: iteration 0's tasks from the world's demonstrations, committed as the
    examine phase's outputs."""
    started = time.perf_counter()
    convs = demonstrated(cfg, inputs.documents, inputs.triples, sim, tools)
    return {**commit_replayed(root, cfg, run, 0, convs, inputs.documents),
            "generation_s": time.perf_counter() - started}


def attempt_phase(student, sim, tools: list, cfg: PlayConfig, run: str, it: int, root: str, progress: bool) -> dict:
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


def commit_demonstrations(cfg: WarmstartConfig, root: str) -> dict:
    """The examiner's demonstrations from a world dataset, committed as `trajectories` and
    `tasks` to the demonstrations dataset; counts of what was made and left out."""
    from generators.synth.synthesize import load_inputs
    from generators.tools.base import base_rows
    from generators.tools.retriever import index_dir
    from generators.tools.simulator import Simulator

    inputs = load_inputs(root, cfg.dataset)
    tools = base_rows()
    sim = Simulator(inputs.documents, seed=cfg.draw_seed, tools=tools, retriever=cfg.retriever,
                    index_dir=index_dir(root))
    demos, skipped = demonstrations(inputs.documents, inputs.triples, sim, examiner_tool(tools), hop_mix=cfg.hop_mix,
                                    n=cfg.n, seed=cfg.draw_seed, dataset=cfg.dataset, top_k=cfg.top_k)
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


def warmstart_configs(cfg: PlayConfig) -> tuple[WarmstartConfig, TrainConfig]:
    """The examiner's warm-start before iteration 0 (the world's demonstrations, then SFT of
    `cfg.examiner` into CHECKPOINTS/warmstart), started over when it was killed before done."""
    ws = WarmstartConfig(dataset=cfg.dataset, hop_mix=cfg.hop_mix, draw_seed=cfg.seed, model=cfg.examiner,
                         out=f"{cfg.checkpoints}/warmstart", train_layers=cfg.train_layers)
    shutil.rmtree(ws.out, ignore_errors=True)
    tcfg = TrainConfig(max_steps=cfg.warmstart_steps, batch_size=cfg.update_batch, lr=cfg.warmstart_lr,
                       checkpoint_every=0, seed=cfg.seed)
    return ws, tcfg


def warmstart_summary(ws: WarmstartConfig, summary: dict) -> dict:
    """The warm-start phase's summary from the selfplay-warmstart flow's."""
    from train.trainer import read_metrics

    trained = summary["training"]
    return {"examiner_model": trained["final_model"], "warmstart_demos": summary["demos"]["demonstrations"],
            "warmstart_loss": [trained["first"]["loss"], trained["last"]["loss"]],
            "warmstart_s": sum(r["seconds"] for r in read_metrics(ws.out))}


def update_phase(kind: str, cfg: PlayConfig, it: int, run: str, model: str | None, root: str, progress: bool,
                 train: Callable, **extra) -> dict:
    """One self-play update stage (selfplay/update.py) of iteration `it`, run by `train`; its summary."""
    from selfplay.update import ExaminerUpdateConfig, StudentUpdateConfig, learns
    from train.checkpoint import latest
    from train.trainer import read_metrics

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
    summary = train(kind, stage, tcfg, root, progress)
    metrics = read_metrics(out)
    out_row = {f"{role}_model": summary["final_model"], f"{role}_loss": summary["last"]["loss"],
               f"{role}_update_s": sum(r["seconds"] for r in metrics), f"{role}_steps": len(metrics)}
    if role == "examiner" and any("demo_nll" in r for r in metrics):  # replayed demonstrations, by likelihood
        out_row["examiner_demo_nll"] = sum(r["demo_nll"] for r in metrics) / len(metrics)
    if role == "student" and extra.get("distill_coef"):
        out_row["teacher_model"] = f"{out}/teacher"
        out_row["teacher_s"] = sum(r.get("teacher_s", 0.0) for r in metrics)
        out_row["teacher_kl"] = sum(r.get("teacher_kl", 0.0) for r in metrics) / len(metrics)  # the distillation term
    return out_row


def iterate(cfg: PlayConfig, root: str, progress: bool, steps: Steps) -> dict:
    """Run the self-play iterations (module docstring); run_id, dataset, the summary of each
    iteration, how many phases a resume skipped and the roles' final models."""
    from generators.synth.synthesize import load_inputs
    from generators.tools.banks import bank_rows
    from generators.tools.base import base_rows
    from generators.tools.retriever import index_dir
    from generators.tools.simulator import Simulator

    cfg.check()
    ds, run = cfg.out_dataset(), run_id(cfg, root)
    done = completed(root, cfg, run)
    if done and not cfg.resume:
        raise ValueError(f"run {run} already completed {len(done)} phase(s) in {ds}; --resume continues it")
    inputs = load_inputs(root, cfg.dataset)
    tools = bank_rows(cfg.tools, inputs.documents, base_rows)  # auto: the corpus's own for an imported corpus
    sim = Simulator(inputs.documents, seed=cfg.seed, tools=tools, retriever=cfg.retriever, index_dir=index_dir(root))
    lambdas = cfg.lambdas() if cfg.train else []
    roles, iterations = Roles(cfg), []

    def run_phase(it: int, phase: str, summary: dict, st) -> dict:
        if phase == "warmstart":
            return steps.warmstart(cfg, root, progress)
        if phase == "examine" and it == 0 and cfg.demo_tasks:
            out = steps.demo(sim, inputs, tools, cfg, run, root)
            st.rows_in, st.rows_out = out["examiner_outputs"], out["tasks"]
        elif phase == "examine":
            reader = roles.backend("reader" if cfg.reader else "student") if cfg.answerability else None
            out = steps.examine(roles.backend("examiner"), sim, inputs.documents, tools, cfg, run, it, root,
                                progress, reader=reader)
            st.rows_in, st.rows_out = out["examiner_outputs"], out["tasks"]
        elif phase == "attempt":
            out = steps.attempt(roles.backend("student"), sim, tools, cfg, run, it, root, progress)
            st.rows_in, st.rows_out = summary.get("tasks"), out["attempts"]
        elif phase == "examiner-update":
            out = update_phase("selfplay-examiner", cfg, it, run, roles.current["examiner"], root, progress,
                               steps.train, reference=roles.reference, kl_coef=cfg.kl_coef)
        else:
            out = update_phase("selfplay-student", cfg, it, run, roles.current["student"], root, progress,
                               steps.train, teacher=roles.current["teacher"], distill_coef=lambdas[it],
                               teacher_context=cfg.teacher_context, tau=cfg.tau)
        st.notes = out.get(f"{phase.split('-')[0]}_update", "")
        return out

    try:
        for it in range(cfg.iterations):
            summary = {"iteration": it}
            for _, phase in (p for p in phases(cfg) if p[0] == it):
                if (it, phase) in done:
                    out = done[(it, phase)]["summary"]
                else:
                    with steps.timed(f"iteration {it}: {phase}") as st:
                        out = run_phase(it, phase, summary, st)
                    save_run_config(root, ds, phase_run(run, it, phase), cfg, extra={"summary": out})
                summary.update(out)
                roles.take(phase, out)  # the next phases use what the updates wrote
            iterations.append(summary)
    finally:
        roles.close()
    return {"run_id": run, "dataset": ds, "iterations": iterations, "skipped_phases": len(done),
            "models": dict(roles.current)}

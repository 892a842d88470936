"""The `run` Prefect flow, the whole loop behind `make run` and `forgeplay run`: world corpus
(or the user's) -> synthesis -> validation -> held-out evaluation of the base model -> SFT ->
evaluation -> self-play tasks and attempts -> label acquisition -> label-aware GRPO ->
evaluation, each stage the project's own flow run as a subflow with the options of its section
of the loop config (flows/loop_config.py), wired to the datasets and models the stages before
made. The record `<root>/runs/<run_id>/run.json` (storage/looprun.py) marks each stage done
when it ends; a rerun of the same config, or `--resume RUN_ID`, skips the stages done and the
others resume inside (committed shards are skipped, the label ledger recovers, training
continues from its checkpoint), so a killed run loses nothing and duplicates nothing. Each
start and the end verify the checksums of every shard the run has written (storage.verify):
a corrupt or missing shard is quarantined, so no later stage reads it, and listed in run.json,
the closing summary and the report. A stage's warnings (an evaluation or a GRPO run with
`max_new_tokens` below the longest turn its model was trained on) are printed when they arise and
added to the stage's notes, which the report's stage table shows. At the end every dataset the
loop wrote gets its card and the run its HTML report.

    forgeplay run                                 # the defaults: about 15 minutes on two cores
    forgeplay run --config pipeline.yaml
    forgeplay run --resume run-3f2a9c0d1e2b
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from flows import loop_config
from flows.common import publish_artifact, tie_temporary_server
from flows.engine import flow, task
from flows.interrupt import resume_with
from storage import resolve_root
from storage.looprun import LoopRecord


class StageFailed(RuntimeError):
    """A stage of the loop raised; the message names the stage, the error and how to resume."""


@task(name="evaluate")
def eval_task(cfg, root: str, progress: bool) -> dict:
    from train.evaluate import run_eval

    return run_eval(cfg, root, progress, warn=lambda w: print(f"warning: {w}"))  # before its rollouts


@task(name="import-corpus")
def import_task(path: str, root: str, dataset: str) -> dict:
    from pathlib import Path

    from generators.corpus.importer import import_file

    rep = import_file(Path(path), root, dataset)
    return {"run_id": rep.run_id, "records": rep.records, "imported": rep.imported, "written": rep.written,
            "rejects": len(rep.rejects)}


class Loop:
    """One run of the loop: its config, record, data root and the model the stages pass on."""

    def __init__(self, config: dict, record: LoopRecord, root: str, progress: bool) -> None:
        self.config, self.record, self.root, self.progress = config, record, root, progress
        self.dataset = config["dataset"]
        self.models = record.data["models"]

    @property
    def policy(self) -> str:
        """The latest trained model (the base model before any training stage)."""
        return self.models.get("policy") or self.models["base"]

    def configs(self, name: str) -> list:
        wired = loop_config.wiring(name, self.config, self.record.folder, self.policy, self.models["base"])
        return loop_config.build(self.config, name, **wired)

    def backend(self) -> dict:
        (bcfg,) = loop_config.build(self.config, "backend")
        return bcfg.to_dict()

    def trained(self, stage: str, summary: dict) -> None:
        """A training stage's model becomes the policy; its run folder is kept for the report."""
        self.models[stage] = self.models["policy"] = summary["final_model"]
        self.record.data["train_runs"][stage] = summary["run_dir"]


def _corpus(loop: Loop) -> tuple[dict, int | None, int | None, str]:
    (world,) = loop.configs("corpus")
    file = loop.config["corpus"].get("file")
    if file:
        out = import_task(file, loop.root, loop.dataset)
        return out, out["records"], out["imported"], f"imported {file}"
    from flows.pipeline import corpus_task
    from flows.configs import PipelineConfig

    out = corpus_task(loop.root, PipelineConfig(dataset=loop.dataset, seed=world.seed, entities=world.entities))
    return out, None, out["documents"] + out["triples"], f"world of {world.entities} entities"


def _synthesize(loop: Loop):
    from flows.synthesize import synthesize_flow

    (synth,) = loop.configs("synthesize")
    s = synthesize_flow(asdict(synth), loop.backend(), loop.root, loop.progress)
    return s, s["planned"], s["written"], f"texts by {synth.texts}; {s['skipped_committed']} already committed"


def _validate(loop: Loop):
    from flows.validate import validate_flow

    (cfg,) = loop.configs("validate")
    s = validate_flow(asdict(cfg), loop.backend(), loop.root, loop.progress)
    loop.record.data["datasets"]["accepted"] = s["accepted_dataset"]
    return s, s["rows_in"], s["rows_out"], f"layers {cfg.layers}"


def _evaluate(label: str) -> Callable:
    def run(loop: Loop):
        (cfg,) = loop.configs("eval")
        s = eval_task(cfg, loop.root, loop.progress)
        loop.record.data["eval"][label] = s
        return s, s["rollouts"], None, f"{label}: exact match {s['em']:.3f}, F1 {s['f1']:.3f}"
    return run


def _train(kind: str) -> Callable:
    def run(loop: Loop):
        from flows.train import train_flow

        cfg, tcfg = loop.configs(kind)
        s = train_flow(kind, asdict(cfg), asdict(tcfg), loop.root, loop.progress)
        loop.trained(kind, s)
        last = s.get("last") or {}
        note = ", ".join(f"{k} {last[k]:.3f}" for k in ("loss", "reward") if k in last)
        return s, None, s["steps"], f"{s['steps']} steps; {note}"
    return run


def _selfplay(loop: Loop):
    from flows.selfplay import selfplay_flow

    (cfg,) = loop.configs("selfplay")
    s = selfplay_flow(asdict(cfg), loop.root, loop.progress)
    loop.record.data["datasets"]["selfplay"] = s["dataset"]
    if cfg.train:
        if cfg.warmstart:
            from selfplay.warmstart import WarmstartConfig

            loop.record.data["datasets"]["demos"] = WarmstartConfig(dataset=cfg.dataset).demos_dataset()
        loop.models["selfplay"] = loop.models["policy"] = s["models"]["student"]
        loop.record.data["train_runs"]["selfplay"] = cfg.checkpoints
    tasks = sum(it.get("tasks", 0) for it in s["iterations"])
    attempts = sum(it.get("attempts", 0) for it in s["iterations"])
    return s, cfg.tasks * cfg.iterations, tasks, f"{tasks} tasks, {attempts} attempts"


def _acquire(loop: Loop):
    from flows.acquire import acquire_flow

    (cfg,) = loop.configs("acquire")
    s = acquire_flow(asdict(cfg), loop.root, loop.progress)
    loop.record.data["datasets"]["labels"] = s["dataset"]
    bought = sum(b.get("bought", 0) for b in s["batches"])
    return s, None, bought, f"{cfg.strategy}: {bought} labels bought now; ledger spent {s['ledger'].get('spent')}"


STAGE_RUNNERS: dict[str, Callable] = {
    "corpus": _corpus, "synthesize": _synthesize, "validate": _validate, "eval-base": _evaluate("base"),
    "sft": _train("sft"), "eval-sft": _evaluate("sft"), "selfplay": _selfplay, "acquire": _acquire,
    "grpo": _train("grpo"), "eval-grpo": _evaluate("grpo"),
}


@flow(name="run", flow_run_name="{run_id}", log_prints=True)
def loop_flow(config: dict, run_id: str, data_root: str | None = None, progress: bool = True) -> dict:
    """Run the loop's stages in order (module docstring); the run record's data."""
    tie_temporary_server()
    from generators.llm.model_store import resolve_model

    root = str(resolve_root(data_root))
    record = LoopRecord.open(root, run_id, config)
    record.data["datasets"].setdefault("world", config["dataset"])
    record.data["models"].setdefault("base", str(resolve_model(config["model"])))
    check_shards(root, record)
    loop = Loop(config, record, root, progress)
    for name in loop_config.STAGES:
        if name in config["skip"] or record.done(name):
            continue
        t = time.perf_counter()
        try:
            summary, rows_in, rows_out, notes = STAGE_RUNNERS[name](loop)
        except Exception as e:
            record.fail(name, f"{type(e).__name__}: {e}")
            raise StageFailed(f"stage {name}: {type(e).__name__}: {e} (the run's record: {record.path}; after a fix, "
                              f"`forgeplay run --resume {run_id}` continues it)") from e
        notes = "; ".join([notes, *(f"warning: {w}" for w in summary.get("warnings") or [])])
        record.finish(name, _plain(summary), time.perf_counter() - t, rows_in, rows_out, notes)
    finish(root, record)
    stages = [{"stage": k, **{f: v.get(f) for f in ("rows_in", "rows_out", "seconds", "notes")}}
              for k, v in record.data["stages"].items()]
    publish_artifact("run-report", f"run {run_id}", stages,
                     {"held-out exact match x1000": {k: round(1000 * v["em"]) for k, v in record.data["eval"].items()}})
    return record.data


def finish(root: str, record: LoopRecord) -> None:
    """The cards of the datasets the loop wrote and the run's report, then the run is done."""
    from storage.card import write_card
    from reports import write_report

    check_shards(root, record)
    for ds in sorted(set(record.data["datasets"].values())):
        record.data.setdefault("cards", {})[ds] = str(write_card(root, ds))
    record.close()
    record.data["report"] = str(write_report(root, record.data["run_id"]))
    record.save()


def check_shards(root: str, record: LoopRecord) -> None:
    """Verify the shards of every dataset the run has written; the record keeps how many each
    dataset has and the quarantined ones (dataset, kind, path, problem), each also printed."""
    from storage import verify
    from storage.manifest import MANIFEST, dataset_dir

    checked, bad = {}, []
    for ds in sorted(set(record.data["datasets"].values())):
        if (dataset_dir(Path(root), ds) / MANIFEST).exists():
            checked[ds], problems = verify(root, ds)
            bad += [asdict(p) for p in problems]
    for p in bad:
        print(f"quarantined {p['path']} ({p['dataset']}/{p['kind']}: {p['problem']}); no stage reads it")
    record.data["shards"] = {"checked": sum(checked.values()), "datasets": checked, "quarantined": bad}
    record.save()


def _plain(summary: dict) -> dict:
    """A stage summary without its markdown report (the artifact keeps it)."""
    return {k: v for k, v in summary.items() if k != "report"}


def run(config: dict, data_root=None, run_id: str | None = None, progress: bool = True) -> dict:
    """The loop on a checked config (loop_config.check), after what it names is checked
    (loop_config.check_names: the base model, a corpus file) before a model loads or a
    server starts; `run_id` default: the config's hash."""
    loop_config.check_names(config)
    run_id = run_id or loop_config.run_id(config)
    resume_with(f"forgeplay run --resume {run_id}")
    return loop_flow(config, run_id, str(data_root) if data_root else None, progress)

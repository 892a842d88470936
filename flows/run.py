"""The `run` Prefect flow, the whole loop behind `make run` and `forgeplay run`: world corpus (or
the user's) -> synthesis -> validation -> held-out evaluation of the base model -> SFT ->
evaluation -> self-play tasks and attempts -> label acquisition -> label-aware GRPO ->
evaluation, the stages flows/loop_stages.py declares, each the project's own flow run as a
subflow with the options of its section of the loop config (flows/loop_config.py), wired to the
datasets and models the stages before made. The record `<root>/runs/<run_id>/run.json`
(storage/loop_runs.py) marks each stage done when it ends; a rerun of the same config, or
`--resume RUN_ID`, skips the stages done and the others resume inside (committed shards are
skipped, the label ledger recovers, training continues from its checkpoint), so a killed run
loses nothing and duplicates nothing. Each start and the end verify the checksums of every
shard the run has written (storage.verify): a corrupt or missing shard is quarantined, so no
later stage reads it, and listed in run.json, the closing summary and the report. A stage's
warnings (an evaluation or a GRPO run with `max_new_tokens` below the longest turn its model
was trained on) are printed when they arise and added to the stage's notes, which the report's
stage table shows. At the end every dataset the loop wrote gets its card and the run its HTML
report.

    forgeplay run                                 # the defaults: about 15 minutes on two cores
    forgeplay run --config pipeline.yaml
    forgeplay run --resume run-3f2a9c0d1e2b
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from flows import loop_config, loop_stages
from flows.common import publish_artifact, tie_temporary_server
from flows.engine import flow
from flows.interrupt import resume_with
from storage import resolve_root
from storage.loop_runs import LoopRecord


class StageFailed(RuntimeError):
    """A stage of the loop raised; the message names the stage, the error and how to resume."""


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
    for stage in loop_stages.STAGES:
        name = stage.name
        if name in config["skip"] or record.done(name):
            continue
        t = time.perf_counter()
        try:
            summary, rows_in, rows_out, notes = stage.run(loop)
        except Exception as e:
            record.fail(name, f"{type(e).__name__}: {e}")
            raise StageFailed(f"stage {name}: {type(e).__name__}: {e} (the run's record: {record.path}; after a fix, "
                              f"`forgeplay run --resume {run_id}` continues it)") from e
        notes = "; ".join([notes, *(f"warning: {w}" for w in summary.get("warnings") or [])])
        record.finish(name, _plain(summary), time.perf_counter() - t, rows_in, rows_out, notes)
    finish(root, record)
    table = [{"stage": k, **{f: v.get(f) for f in ("rows_in", "rows_out", "seconds", "notes")}}
             for k, v in record.data["stages"].items()]
    publish_artifact("run-report", f"run {run_id}", table,
                     {"held-out exact match x1000": {k: round(1000 * v["em"]) for k, v in record.data["eval"].items()}})
    return record.data


def finish(root: str, record: LoopRecord) -> None:
    """The cards of the datasets the loop wrote and the run's report, then the run is done."""
    from flows.loop_stages import report_parts
    from reports import write_report
    from storage.card import write_card

    check_shards(root, record)
    for ds in sorted(set(record.data["datasets"].values())):
        record.data.setdefault("cards", {})[ds] = str(write_card(root, ds))
    record.close()
    record.data["report"] = str(write_report(root, record.data["run_id"], parts=report_parts()))
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

"""The `pipeline` Prefect flow, the data half of the loop (`forgeplay run` adds evaluation and
training): on the embedded default model, build the fictional world corpus, synthesize tool-use
trajectories, validate them (schema, rules with tool-call replay, dedup), and show what was
made. Each stage is idempotent (content-hash ids, committed shards are skipped), so a rerun
resumes where a killed run stopped. An option it shares with `synthesize` has its default.

    forgeplay pipeline --dataset demo --entities 1000 --n 16
"""

from __future__ import annotations

from dataclasses import asdict

from flows.common import Stages, tie_temporary_server
from flows.configs import PipelineConfig
from flows.engine import flow, task
from generators.llm.registry import BackendConfig, check_backend
from storage import manifest, resolve_root


@task(name="world-corpus", retries=1)
def corpus_task(root: str, cfg: PipelineConfig) -> dict:
    from generators.corpus.build import WorldConfig, write

    _, run_id, written = write(WorldConfig(seed=cfg.seed, entities=cfg.entities), root, cfg.dataset)
    return {"run_id": run_id, **written}


@task(name="prepare-model", retries=1)
def model_task(model: str | None) -> str:
    from generators.llm.model_store import resolve_model

    return str(resolve_model(model))


@flow(name="pipeline", log_prints=True)
def pipeline_flow(config: dict, backend: dict, data_root: str | None = None) -> dict:
    tie_temporary_server()
    from flows.synthesize import synthesize_flow
    from flows.validate import validate_flow
    from generators.synth.synthesize import SynthConfig
    from validators.validator import ValidateConfig

    cfg, bcfg = PipelineConfig(**config), BackendConfig(**backend)
    root = str(resolve_root(data_root))
    stages = Stages()
    with stages.stage("model") as st:
        if bcfg.backend == "transformers":
            bcfg.model = model_task(bcfg.model)
        st.notes = bcfg.model or bcfg.backend
    with stages.stage("world corpus") as st:
        world = corpus_task(root, cfg)
        st.rows_out, st.notes = world["documents"] + world["triples"], f"new rows; run {world['run_id']}"
    with stages.stage("synthesize") as st:
        synth = SynthConfig(dataset=cfg.dataset, n=cfg.n, seed=cfg.seed, chunk=cfg.chunk,
                            max_think_tokens=cfg.max_think_tokens, texts=cfg.texts)
        summary = synthesize_flow(asdict(synth), bcfg.to_dict(), root)
        st.rows_in, st.rows_out = summary["planned"], summary["written"]
        st.notes = f"{summary['skipped_committed']} already committed"
    with stages.stage("validate") as st:
        checked = validate_flow(asdict(ValidateConfig(dataset=cfg.dataset, layers="schema,rules,dedup")),
                                bcfg.to_dict(), root, False)
        st.rows_in, st.rows_out = checked["rows_in"], checked["rows_out"]
        st.notes = f"schema, rules (with replay), dedup; accepted -> {checked['accepted_dataset']}"
    totals: dict[str, int] = {}
    for e in manifest.read(manifest.dataset_dir(resolve_root(root), cfg.dataset)):
        totals[e.kind] = totals.get(e.kind, 0) + e.rows
    report = stages.publish("pipeline-report", f"pipeline {cfg.dataset}", {"rows per kind": totals})
    return {"stages": stages.as_dicts(), "rows": totals, "synthesize": summary, "validate": checked, "report": report}


def run(cfg: PipelineConfig, bcfg: BackendConfig, data_root=None) -> dict:
    """The flow, after the dataset name and the backend options are checked (before a model
    loads or a server starts)."""
    manifest.check_name("dataset name", cfg.dataset)
    if cfg.texts == "llm":
        check_backend(bcfg)
    return pipeline_flow(asdict(cfg), bcfg.to_dict(), str(data_root) if data_root else None)

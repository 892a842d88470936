"""The `validate` Prefect flow: records (a dataset's trajectories/tasks/triples, or a user's
JSONL/Parquet file) -> `verdicts` rows for every check + the accepted records as shards.

Accepted records go to dataset `<dataset>_valid` (or --out) under kind `<kind>`, keeping
their original id; verdicts go to the input dataset (with --input: to --out). One task per
chunk commits the accepted shard first, then the verdict shard; a rerun of the same config
skips records whose verdicts are committed, so a kill + rerun leaves no duplicates.

    forgeplay validate --dataset demo --layers schema,rules,dedup
    forgeplay validate --input other.jsonl --kind trajectories --out theirs
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict

from prefect import flow, task
from prefect.cache_policies import NONE
from tqdm.auto import tqdm

from flows.common import config_hash, publish_artifact, save_run_config
from generators.llm.registry import BackendConfig, make_backend
from storage import Catalog, ShardWriter, load_table, resolve_root
from storage.funnel import funnel_sql
from validators.rules import RuleContext
from validators.runner import ValidateConfig, Validator, raw_id, read_input


def _corpus(root: str, dataset: str | None):
    if not dataset:
        return {}, None
    docs = load_table(dataset, "documents", root).to_pylist()
    tools = load_table(dataset, "tools", root).to_pylist()
    documents = {d["doc_id"]: (d.get("title") or "", d.get("text") or "") for d in docs}
    if not docs or not tools:
        return documents, None
    from generators.tools.simulator import Simulator

    sims: dict[int, Simulator] = {}

    def simulator(seed: int) -> Simulator:  # one BM25 index per seed, built on first use
        if seed not in sims:
            sims[seed] = Simulator(docs, seed=seed, tools=tools)
        return sims[seed]

    return documents, simulator


@task(name="validate-chunk", cache_policy=NONE, retries=1)
def chunk_task(validator: Validator, records, root: str, verdict_ds: str, accepted_ds: str, kind: str,
               run_id: str, lineage: dict) -> tuple[int, int]:
    rows, accepted = validator.process(records)
    if accepted:
        with ShardWriter(root, accepted_ds, kind, run_id, lineage=lineage) as w:
            w.write([{**a, "lineage": {**lineage, "parent_ids": [a["id"]]}} for a in accepted])
    with ShardWriter(root, verdict_ds, "verdicts", run_id, lineage=lineage) as w:
        w.write(rows)
    return len(rows), len(accepted)


@flow(name="validate", log_prints=True)
def validate_flow(config: dict, backend: dict, data_root: str | None = None, progress: bool = True) -> dict:
    """Validate records with the layers of `config` (ValidateConfig fields)."""
    cfg, bcfg = ValidateConfig(**config), BackendConfig(**backend)
    root = str(resolve_root(data_root))
    layers = cfg.layer_list()
    uses_model = "judge" in layers or "answerability" in layers
    run_id = cfg.run_id or f"validate-{config_hash({'v': asdict(cfg), 'b': bcfg.config_hash() if uses_model else None})}"
    t0 = time.perf_counter()
    if cfg.input:
        if not cfg.out:
            raise ValueError("--input needs --out (the dataset that receives verdicts and accepted records)")
        raw = read_input(cfg.input)
        verdict_ds = accepted_ds = cfg.out
    else:
        if not cfg.dataset:
            raise ValueError("give --dataset or --input")
        raw = load_table(cfg.dataset, cfg.kind, root).to_pylist()
        if not raw:
            raise ValueError(f"dataset {cfg.dataset!r} has no {cfg.kind} rows under {root}")
        verdict_ds, accepted_ds = cfg.dataset, cfg.out or f"{cfg.dataset}_valid"
    records = [(raw_id(r), r) for r in raw]
    documents, sim_for = _corpus(root, cfg.dataset)
    be = make_backend(bcfg) if uses_model else None
    validator = Validator(cfg, cfg.kind, RuleContext(sim_for, cfg.answer_min_f1, cfg.replay), be, documents)
    lineage = {"model": str(getattr(be, "model", None)) if be else None, "backend": bcfg.backend if be else None,
               "config_hash": config_hash(asdict(cfg)), "parent_ids": []}

    done = set(load_table(verdict_ds, "verdicts", root, run_id=run_id, columns=["record_id"]).column("record_id").to_pylist())
    kept = set(load_table(accepted_ds, cfg.kind, root, run_id=run_id, columns=["id"]).column("id").to_pylist()) \
        if done else set()
    written = accepted = skipped = 0
    bar = tqdm(total=len(records), desc="validate", unit="rec", disable=not progress)
    for i in range(0, len(records), cfg.chunk):
        chunk = records[i:i + cfg.chunk]
        todo = []
        for rid, r in chunk:
            if rid in done:
                skipped += 1
                if rid in kept:
                    validator.remember(rid, r)
            else:
                todo.append((rid, r))
        if todo:
            n_v, n_a = chunk_task(validator, todo, root, verdict_ds, accepted_ds, cfg.kind, run_id, lineage)
            written, accepted = written + n_v, accepted + n_a
        bar.update(len(chunk))
    bar.close()
    if be is not None:
        be.close()

    with Catalog(root) as cat:
        cols = ["layer", "check", "reason", "rejected", "rows_in", "rows_out"]
        funnel = [dict(zip(cols, r[:6])) for r in cat.rows(funnel_sql(verdict_ds, run_id))]
        reasons = Counter({f"{f['layer']}/{f['reason']}": f["rejected"] for f in funnel if f["reason"]})
        total_acc = cat.scalar(f'SELECT count(*) FROM "{accepted_ds}_{cfg.kind}" WHERE run_id = ?', [run_id]) \
            if f"{accepted_ds}_{cfg.kind}" in cat.views else 0
    wall = time.perf_counter() - t0
    stages = [{"stage": layer, "rows_in": next((f["rows_in"] for f in funnel if f["layer"] == (
        "dataset" if layer == "dedup" else layer)), 0), "rows_out": next((f["rows_out"] for f in funnel if f["layer"] == (
            "dataset" if layer == "dedup" else layer)), 0)} for layer in layers]
    summary = {"run_id": run_id, "verdict_dataset": verdict_ds, "accepted_dataset": accepted_ds, "kind": cfg.kind,
               "rows_in": len(records), "rows_out": total_acc, "accepted_this_run": accepted,
               "skipped_committed": skipped, "verdicts_written": written, "funnel": funnel,
               "seconds": wall, "records_per_s": (len(records) - skipped) / wall if wall else 0.0}
    save_run_config(root, verdict_ds, run_id, {"validate": asdict(cfg), "backend": bcfg.to_dict()},
                    extra={"summary": {k: v for k, v in summary.items() if k != "funnel"}})
    summary["report"] = publish_artifact("validate-report", f"validate {verdict_ds} ({run_id})", stages,
                                         {"rejects by layer/reason": dict(reasons)})
    return summary


def run(cfg: ValidateConfig, bcfg: BackendConfig | None = None, data_root=None, progress: bool = True) -> dict:
    """Run the flow (Prefect's temporary local server when no PREFECT_API_URL is set)."""
    return validate_flow(asdict(cfg), (bcfg or BackendConfig()).to_dict(), str(data_root) if data_root else None, progress)

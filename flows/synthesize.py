"""The `synthesize` Prefect flow: documents + triples -> tool bank + trajectories shards.

Tasks: load the inputs, build the gated tool bank (written as `tools`), plan every triple,
then one task per chunk that asks the backend for the reasoning texts and commits the
chunk's trajectories as one shard. A rerun of the same config resumes: trajectories whose
id is already committed are skipped, so nothing is generated or written twice. The flow ends
with a Prefect artifact (rows per stage, case and route mix, text sources, timing).

    forgeplay synthesize --dataset demo --n 500
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict

from prefect import flow, task
from prefect.cache_policies import NONE
from tqdm.auto import tqdm

from flows.common import publish_artifact
from generators.llm.registry import BackendConfig, make_backend
from generators.synth.assemble import traj_id_for
from generators.synth.synthesize import Session, SynthConfig, load_inputs, mix_report
from storage import ShardWriter, load_table, resolve_root, write_rows
from storage.runs import config_hash, save_run_config


@task(name="load-inputs", cache_policy=NONE, retries=1)
def load_task(root: str, dataset: str):
    return load_inputs(root, dataset)


@task(name="build-tool-bank", cache_policy=NONE, retries=1)
def bank_task(root: str, dataset: str, run_id: str, seed: int, variants: int, lineage: dict, backend=None):
    from generators.tools.bank import generate_bank

    build = generate_bank(seed=seed, variants_per_tool=variants, backend=backend)
    write_rows(root, dataset, "tools", run_id, build.tools, lineage=lineage)
    return build.tools, build.reasons()


@task(name="synthesize-chunk", cache_policy=NONE, retries=2, retry_delay_seconds=5)
def chunk_task(session: Session, plans, backend, root: str, dataset: str, run_id: str, lineage: dict,
               triple_ids: dict) -> dict:
    rows, stats = session.trajectories(plans, backend, run_id)
    t = time.perf_counter()
    with ShardWriter(root, dataset, "trajectories", run_id, lineage=lineage) as w:
        w.write([{**r, "lineage": {**lineage, "parent_ids": [triple_ids[r["triple_id"]]]}} for r in rows])
    stats["write_s"] = time.perf_counter() - t
    stats["mix"] = mix_report(rows)
    return stats


@flow(name="synthesize", log_prints=True)
def synthesize_flow(config: dict, backend: dict, data_root: str | None = None, progress: bool = True) -> dict:
    """Synthesize trajectories for `config` (SynthConfig fields) with `backend` (BackendConfig fields)."""
    cfg, bcfg = SynthConfig(**config), BackendConfig(**backend)
    root = str(resolve_root(data_root))
    run_id = cfg.run_id or f"synth-{config_hash({'synth': asdict(cfg), 'backend': bcfg.config_hash()})}"
    stages, t0 = [], time.perf_counter()

    inputs = load_task(root, cfg.dataset)
    stages.append({"stage": "load", "rows_in": len(inputs.triples), "rows_out": len(inputs.triples),
                   "seconds": time.perf_counter() - t0, "notes": f"{len(inputs.documents)} documents"})
    t = time.perf_counter()
    be = make_backend(bcfg) if cfg.texts == "llm" else None
    lineage = {"model": str(getattr(be, "model", bcfg.model)) if be else None, "backend": bcfg.backend if be else None,
               "config_hash": config_hash(asdict(cfg)), "parent_ids": []}
    tools, gate_reasons = bank_task(root, cfg.dataset, run_id, cfg.seed, cfg.variants_per_tool, lineage,
                                    be if cfg.llm_variants else None)
    stages.append({"stage": "tool bank", "rows_out": len(tools), "seconds": time.perf_counter() - t,
                   "notes": ", ".join(f"{k}={v}" for k, v in gate_reasons.items())})

    t = time.perf_counter()
    session = Session(inputs, cfg, tools)
    plans = session.plans()
    done = set(load_table(cfg.dataset, "trajectories", root, run_id=run_id, columns=["traj_id"])
               .column("traj_id").to_pylist())
    todo = [p for p in plans if traj_id_for(run_id, p.triple_id, p.case) not in done]
    stages.append({"stage": "plan", "rows_in": len(inputs.triples), "rows_out": len(plans),
                   "seconds": time.perf_counter() - t,
                   "notes": f"{len(plans) - len(todo)} already committed; unplannable: {dict(session.rejected)}"})

    triple_ids = {tr["triple_id"]: tr["id"] for tr in inputs.triples}
    totals: Counter = Counter()
    mix: dict[str, Counter] = {"case": Counter(), "route": Counter()}
    sources, fallbacks = Counter(), Counter()
    bar = tqdm(total=len(todo), desc="synthesize", unit="traj", disable=not progress)
    for i in range(0, len(todo), cfg.chunk):
        chunk = todo[i:i + cfg.chunk]
        st = chunk_task(session, chunk, be, root, cfg.dataset, run_id, lineage, triple_ids)
        for k in ("program_s", "llm_s", "write_s", "slots"):
            totals[k] += st[k]
        for k in ("case", "route"):
            mix[k].update(st["mix"][k])
        sources.update(st["sources"])
        fallbacks.update(st["fallbacks"])
        bar.update(len(chunk))
        usage = getattr(be, "usage", None)
        if usage is not None and usage.seconds:
            bar.set_postfix(tok_s=f"{usage.completion_tokens / usage.seconds:.0f}")
    bar.close()
    usage = be.usage.to_dict() if getattr(be, "usage", None) else {}
    if be is not None:
        be.close()

    wall = time.perf_counter() - t0
    stages.append({"stage": "synthesize", "rows_in": len(todo), "rows_out": len(todo), "seconds": totals["llm_s"] + totals["program_s"],
                   "notes": f"LLM {totals['llm_s']:.1f}s, program {totals['program_s']:.2f}s, {totals['slots']} texts"})
    stages.append({"stage": "write", "rows_out": len(todo), "seconds": totals["write_s"]})
    summary = {"run_id": run_id, "dataset": cfg.dataset, "planned": len(plans), "written": len(todo),
               "skipped_committed": len(plans) - len(todo), "case": dict(mix["case"]), "route": dict(mix["route"]),
               "text_sources": dict(sources), "fallbacks": dict(fallbacks), "usage": usage,
               "seconds": wall, "llm_seconds": totals["llm_s"],
               "program_fraction": (wall - totals["llm_s"]) / wall if wall else 0.0,
               "unplannable": dict(session.rejected)}
    save_run_config(root, cfg.dataset, run_id, {"synth": asdict(cfg), "backend": bcfg.to_dict()},
                    extra={"summary": summary})
    summary["report"] = publish_artifact("synthesize-report", f"synthesize {cfg.dataset} ({run_id})", stages,
                                         {"case": dict(mix["case"]), "route": dict(mix["route"]),
                                          "text source": dict(sources)})
    return summary


def run(cfg: SynthConfig, bcfg: BackendConfig, data_root=None, progress: bool = True) -> dict:
    """Run the flow (Prefect's temporary local server when no PREFECT_API_URL is set)."""
    return synthesize_flow(asdict(cfg), bcfg.to_dict(), str(data_root) if data_root else None, progress)

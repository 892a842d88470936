"""The `synthesize` Prefect flow: documents + triples -> tool bank + trajectories shards.

Tasks: load the inputs, check that the triples allow --n (before the bank is gated or a model
loads), build the gated tool bank (written as `tools`; the tools `forgeplay tools import` put in
the dataset join it), plan the run (Session.picks: the triples' plans, then their variants past
the number of triples), then the chunks: each chunk's requests for the reasoning texts are
handed to the backend as a stream (`streamed`: an HTTP backend gets the next chunks' requests
while it answers the earlier ones, so the engine never waits on a chunk's end or a commit),
and one task per chunk commits its trajectories once its own answers are in, in order
(model texts: a shard per chunk; template texts: shards of TEMPLATE_SHARD rows, `committer`).
Every answer is journaled as it arrives (`<dataset>/_journal/<run_id>.jsonl`, removed when the
run ends). A rerun of the same config resumes: trajectories whose id is already committed are
skipped and answers in the journal are not asked again, so nothing is paid for or written twice. The flow ends
with a Prefect artifact (rows per stage, case and route mix, text sources overall and per
slot kind with the reasons for template fallbacks, timing).

The chunks run one after another in the flow, or fan out (`--workers N`: a pool of N
processes; `--task-runner dask|ray [--address ADDR]`: a Dask or Ray cluster, flows/runners.py),
a few in flight per worker. Each chunk task gets the session (the corpus and its simulator,
pickled, a few MB) and commits its own shard (commits are atomic and the manifest is
appended under a file lock, so workers commit side by side); the rows and ids are the same
as one after another, only the order of the shards may differ. A model loaded in the flow
does not travel: fanning out with `--texts llm` needs the HTTP backend (`--backend openai`).

    forgeplay synthesize --dataset demo --n 500
    forgeplay synthesize --dataset demo --n 500 --texts template --task-runner dask --workers 2
    forgeplay synthesize --dataset mine --n 100 --tools corpus   # the corpus's own tools (--tools world|corpus|FILE)
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout  # (the builtin TimeoutError only from Python 3.11)
from dataclasses import asdict
from functools import partial
from itertools import islice
from typing import Callable

from tqdm.auto import tqdm

from flows.common import Stages, require_world, tie_temporary_server
from flows.engine import flow, task
from flows.runners import RunnerConfig, cancel, workers_report_here
from generators.llm.base import Streaming, Usage, submit
from generators.llm.registry import BackendConfig, check_backend, make_backend
from generators.synth.assemble import traj_id_for
from generators.synth.synthesize import LATER_DEFAULTS, Session, SynthConfig, load_inputs
from generators.tools.retriever import check_reachable, index_dir
from generators.synth.tally import Tally, mix_report
from generators.tools.imported import imported_rows
from storage import ShardWriter, load_table, resolve_root, write_rows
from storage.idset import IdSet
from storage.journal import Journal, journal_path
from storage.resumable import RunWriter
from storage.runs import config_hash, save_run_config, without_later_defaults


SHIPPED_BACKENDS = ("openai",)  # backends whose object a worker process can receive (an HTTP client's settings)
TEMPLATE_SHARD = 5000  # trajectories a shard of template texts holds (committer)


@task(name="load-inputs", retries=1)
def load_task(root: str, dataset: str):
    return load_inputs(root, dataset)


@task(name="build-tool-bank", retries=1)
def bank_task(root: str, dataset: str, run_id: str, seed: int, variants: int, lineage: dict, imported: list,
              backend=None, calculator: bool = False, choice: str = "world", documents: list | None = None):
    """The bank `choice` names (generators/tools/banks.py; world: gated), written as this run's
    `tools`, plus the dataset's imported tools."""
    from generators.tools.bank import generate_bank
    from generators.tools.compute import calculator_row

    if choice == "world":
        build = generate_bank(seed=seed, variants_per_tool=variants, backend=backend,
                              reserved_names=[t["name"] for t in imported], calculator=calculator)
        rows, reasons = build.tools, build.reasons()
    else:
        from pathlib import Path

        from generators.tools.banks import file_bank
        from generators.tools.corpus_bank import corpus_bank

        rows = corpus_bank(documents or []) if choice == "corpus" else file_bank(Path(choice))
        rows = rows + ([calculator_row()] if calculator else [])
        reasons = {f"{choice if choice == 'corpus' else 'file'} tools": len(rows)}
    write_rows(root, dataset, "tools", run_id, rows, lineage=lineage)
    return rows + imported, reasons


@task(name="synthesize-chunk", retries=2, retry_delay_seconds=5)
def chunk_task(session: Session, plans, backend, root: str, dataset: str, run_id: str, lineage: dict,
               triple_ids: dict, commit: Callable[[list[dict]], int] | None = None) -> dict:
    """Generate one chunk's trajectories and commit them (with `commit`, the run's writer in
    the flow process; a worker commits the chunk as one shard on its own); its stats, with the
    backend usage of this chunk (a copy of the backend in a worker process counts there)."""
    used = getattr(backend, "usage", None)
    before = asdict(used) if used is not None else None
    rows, stats = session.trajectories(plans, backend, run_id)
    if used is not None:
        stats["usage"] = {k: v - before[k] for k, v in asdict(backend.usage).items()}
    t = time.perf_counter()
    rows = [{**r, "lineage": {**lineage, "parent_ids": [triple_ids[r["triple_id"]]]}} for r in rows]
    if commit is not None:
        commit(rows)
    else:
        write_rows(root, dataset, "trajectories", run_id, rows, lineage=lineage)
    stats["write_s"] = time.perf_counter() - t
    stats["mix"] = mix_report(rows)
    return stats


@task(name="commit-chunk", retries=2, retry_delay_seconds=5)
def commit_task(session: Session, prep, outs, llm_s: float, run_id: str, lineage: dict, triple_ids: dict,
                commit: Callable[[list[dict]], int]) -> dict:
    """A chunk's rows from its answers (`outs`; None: template texts), committed with the
    run's writer; its stats."""
    rows, stats = session.finish(prep, outs, run_id, llm_s)
    t = time.perf_counter()
    commit([{**r, "lineage": {**lineage, "parent_ids": [triple_ids[r["triple_id"]]]}} for r in rows])
    stats["write_s"] = time.perf_counter() - t
    stats["mix"] = mix_report(rows)
    return stats


def streamed(session: Session, todo, backend, size: int):
    """(chunk size, prepared chunk, its answers, seconds waited for them), chunk by chunk in
    order. A streaming backend gets the next chunks' requests while it answers the earlier
    ones (up to twice its concurrency queued), so the engine never waits on a chunk's end or
    a commit; any other backend answers one chunk at a time."""
    depth = (lambda: 2 * backend.max_concurrency) if isinstance(backend, Streaming) else (lambda: 0)
    in_flight, queued, more, waited = deque(), 0, True, 0.0
    try:
        while True:
            while more and (not in_flight or queued < depth()):
                chunk = list(islice(todo, size))
                if not chunk:
                    more = False
                    break
                prep = session.prepare(chunk)
                if backend is None or not prep.requests:
                    fut = Future()
                    fut.set_result(None if backend is None else [])
                else:
                    fut = submit(backend, prep.requests)
                in_flight.append((len(chunk), prep, fut))
                queued += len(prep.requests)
            if not in_flight:
                return
            n, prep, fut = in_flight[0]
            t = time.perf_counter()
            try:  # not for long: the backend's concurrency may grow meanwhile, and more may be queued
                outs = fut.result(timeout=0.25)
            except FutureTimeout:
                waited += time.perf_counter() - t
                continue
            in_flight.popleft()
            queued -= len(prep.requests)
            yield n, prep, outs, waited + time.perf_counter() - t
            waited = 0.0
    finally:
        for _, _, fut in in_flight:
            fut.cancel()


def committer(root: str, dataset: str, run_id: str, lineage: dict, texts: str) -> ShardWriter | RunWriter:
    """The flow process's writer of a run's trajectories: model-written texts are committed chunk
    by chunk (paid work is kept at once); template texts, cheap to make again, in shards of
    TEMPLATE_SHARD rows (a few commits for a large run; a kill redoes at most one shard)."""
    if texts == "template":
        return ShardWriter(root, dataset, "trajectories", run_id, lineage=lineage, rows_per_shard=TEMPLATE_SHARD)
    return RunWriter(root, run_id, lineage)


@flow(name="synthesize", log_prints=True)
def synthesize_flow(config: dict, backend: dict, data_root: str | None = None, progress: bool = True,
                    runner: dict | None = None, workers: int = 1) -> dict:
    """Synthesize trajectories for `config` (SynthConfig fields) with `backend` (BackendConfig
    fields); the chunks fan out when `runner` (RunnerConfig fields) and `workers` say so
    (`run` puts the flow on that task runner)."""
    tie_temporary_server()
    fan_out = RunnerConfig(**(runner or {})).fans_out(workers)
    cfg, bcfg = SynthConfig(**config), BackendConfig(**backend)
    root = str(resolve_root(data_root))
    imported = imported_rows(load_table(cfg.dataset, "tools", root).to_pylist())  # `forgeplay tools import`
    keyed = {"synth": without_later_defaults({k: v for k, v in asdict(cfg).items() if k != "allow_fewer"},
                                             LATER_DEFAULTS),
             "backend": bcfg.config_hash()}
    if imported:  # new imports make a new run; without any, run ids stay what they were
        keyed["imported_tools"] = [t["tool_id"] for t in imported]
    from generators.tools.banks import choice_key, resolve_choice

    bank = resolve_choice(cfg.tools, load_table(cfg.dataset, "documents", root, columns=["source"])
                          .column("source").unique().to_pylist())
    if bank != "world":  # the bank a run offered before --tools existed keeps its run ids
        keyed["tools"] = choice_key(bank)
    if cfg.hold_out:  # the ids make the run too: the same file with other ids is another split
        keyed["held_out"] = sorted(cfg.held_out())
    run_id = cfg.run_id or f"synth-{config_hash(keyed)}"
    stages, t0 = Stages(), time.perf_counter()
    with stages.stage("load") as st:
        inputs = load_task(root, cfg.dataset)
        st.rows_in = st.rows_out = len(inputs.triples)
        st.notes = f"{len(inputs.documents)} documents"
    check_reachable(cfg.retriever)
    session = Session(inputs, cfg, index_dir=index_dir(root))
    short = session.shortfall()  # before the bank is gated and any model loads
    if short:
        raise ValueError(short)
    # every answer paid for is journaled as it arrives, so a killed run asks nothing twice
    journal = Journal(journal_path(root, cfg.dataset, run_id)) if cfg.texts == "llm" and not fan_out else None
    be = make_backend(bcfg, journal=journal) if cfg.texts == "llm" else None
    lineage = {"model": str(getattr(be, "model", bcfg.model)) if be else None, "backend": bcfg.backend if be else None,
               "config_hash": config_hash(asdict(cfg)), "parent_ids": []}
    with stages.stage("tool bank") as st:
        tools, gate_reasons = bank_task(root, cfg.dataset, run_id, cfg.seed, cfg.variants_per_tool, lineage,
                                        imported, be if cfg.llm_variants else None, cfg.calculator, bank,
                                        inputs.documents if bank == "corpus" else None)
        st.rows_out = len(tools)
        st.notes = ", ".join([f"{k}={v}" for k, v in gate_reasons.items()] + [f"imported={len(imported)}"])
    with stages.stage("plan", rows_in=len(inputs.triples)) as st:
        session.set_tools(tools)
        if session.shortfall():  # (the bank had no calculator after all: routes may differ)
            raise ValueError(session.shortfall())
        planned = min(cfg.n, session.capacity())
        done = IdSet(load_table(cfg.dataset, "trajectories", root, run_id=run_id, columns=["traj_id"]).column("traj_id"))
        st.rows_out = planned
        st.notes = (f"{len(done)} already committed; {session.triples_in_use()} triples in use, up to "
                    f"{cfg.per_triple} each; held out: {len(session.held_out)}; unplannable: {dict(session.rejected)}")

    triple_ids = {tr["triple_id"]: tr["id"] for tr in inputs.triples}
    todo = (p for p in session.picks() if traj_id_for(run_id, p.triple_id, p.case, p.variant) not in done)
    writer = None if fan_out else committer(root, cfg.dataset, run_id, lineage, cfg.texts)
    if writer is None:
        commit = None
    elif isinstance(writer, ShardWriter):
        commit = writer.write
    else:
        commit = partial(writer.commit, cfg.dataset, "trajectories")
    tally, in_flight, written = Tally(), deque(), 0  # (size, stats or their future) of chunks not added yet
    with tqdm(total=max(0, planned - len(done)), desc="synthesize", unit="traj", disable=not progress) as bar:
        def add_oldest() -> None:
            size, out = in_flight.popleft()
            stats = out.result() if fan_out else out
            tally.add(stats)
            if fan_out and "usage" in stats:  # the flow's backend did not see a worker's calls
                be.usage.add(Usage(**stats["usage"]))
            bar.update(size)
            if getattr(be, "usage", None) is not None and be.usage.seconds:
                bar.set_postfix(tok_s=f"{be.usage.completion_tokens / be.usage.seconds:.0f}")

        try:
            if fan_out:
                while chunk := list(islice(todo, cfg.chunk)):
                    written += len(chunk)
                    args = (session, chunk, be, root, cfg.dataset, run_id, lineage, triple_ids)
                    in_flight.append((len(chunk), chunk_task.submit(*args)))
                    while len(in_flight) >= 2 * workers:  # workers stay busy, memory bounded
                        add_oldest()
            else:
                for n, prep, outs, waited in streamed(session, todo, be, cfg.chunk):
                    written += n
                    in_flight.append((n, commit_task(session, prep, outs, waited, run_id, lineage, triple_ids,
                                                     commit)))
                    add_oldest()
            while in_flight:
                add_oldest()
            if isinstance(writer, ShardWriter):
                writer.close()  # the last template shard
        except BaseException:
            if be is not None:
                be.close()
            if journal is not None:
                journal.close()  # kept: a rerun reads its answers back
            raise
        finally:
            cancel([out for _, out in in_flight] if fan_out else [])
    usage = be.usage.to_dict() if getattr(be, "usage", None) else {}
    if be is not None:
        be.close()
    if journal is not None:
        journal.remove()  # every answer it holds is in a committed row now

    wall = time.perf_counter() - t0
    stages.add("synthesize", written, written, tally.llm_s + tally.program_s,
               f"LLM {tally.llm_s:.1f}s, program {tally.program_s:.2f}s, {tally.slots} texts")
    stages.add("write", rows_out=written, seconds=tally.write_s)
    summary = {"run_id": run_id, "dataset": cfg.dataset, "asked": cfg.n, "planned": planned, "written": written,
               "skipped_committed": planned - written, "capacity": session.capacity(),
               "triples_in_use": session.triples_in_use(), "per_triple": cfg.per_triple,
               "case": dict(tally.case), "route": dict(tally.route),
               "text_sources": dict(tally.sources), "fallbacks": dict(tally.fallbacks),
               "texts_by_slot": tally.slot_report(), "usage": usage,
               "seconds": wall, "llm_seconds": tally.llm_s,
               "program_fraction": (wall - tally.llm_s) / wall if wall else 0.0,
               "unplannable": dict(session.rejected)}
    save_run_config(root, cfg.dataset, run_id, {"synth": asdict(cfg), "backend": bcfg.to_dict()},
                    extra={"summary": summary})
    summary["report"] = stages.publish("synthesize-report", f"synthesize {cfg.dataset} ({run_id})",
                                       {"case": summary["case"], "route": summary["route"],
                                        "text source": summary["text_sources"],
                                        "text source by slot kind": {f"{kind}: {src}": n for kind, c in
                                                                     sorted(tally.by_slot.items())
                                                                     for src, n in c.items()}})
    return summary


def check_inputs(cfg: SynthConfig, bcfg: BackendConfig, root) -> None:
    """What a run reads and the options that name it, checked before any model loads or
    Prefect server starts (one-line ValueError): the dataset's triples and documents, the
    --hold-out file and --top-k, and the backend when a model writes texts or variants."""
    from generators.tools.banks import check_option

    require_world(root, cfg.dataset)
    check_option(cfg.tools)
    cfg.held_out()
    cfg.top_k_choices()
    if cfg.texts == "llm" or cfg.llm_variants:
        check_backend(bcfg)


def run(cfg: SynthConfig, bcfg: BackendConfig, data_root=None, progress: bool = True,
        runner: RunnerConfig | None = None, workers: int = 1) -> dict:
    """Check the options and what they name (the task runner, `check_inputs`) before any model
    loads or Prefect server starts; then run the flow: on `runner`'s task runner when it fans
    out (a Prefect flow run), else as flows/engine.py decides. The data root is made absolute
    for workers elsewhere."""
    runner = runner or RunnerConfig()
    root = resolve_root(data_root).absolute()
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    fan_out = runner.fans_out(workers)
    flow = synthesize_flow.with_options(task_runner=runner.make(workers)) if fan_out else synthesize_flow
    if fan_out and cfg.texts == "llm" and bcfg.backend not in SHIPPED_BACKENDS:
        raise ValueError(f"fanning out (--workers {workers}, --task-runner {runner.task_runner}) sends each chunk "
                         f"to another process, and the {bcfg.backend} backend's model cannot go along: use "
                         f"--texts template or --backend {' or '.join(SHIPPED_BACKENDS)}")
    check_inputs(cfg, bcfg, root)
    with workers_report_here(runner, workers):
        return flow(asdict(cfg), bcfg.to_dict(), str(root), progress, asdict(runner), workers)

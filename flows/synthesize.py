"""The `synthesize` Prefect flow: documents + triples -> tool bank + trajectories shards.

Tasks: load the inputs, check that the triples allow --n (before the bank is gated or a model
loads), build the gated tool bank (written as `tools`; the tools `forgeplay tools import` put in
the dataset join it), plan the run (Session.picks: the triples' plans, then their variants past
the number of triples), then the chunks: each chunk's requests for the reasoning texts are
handed to the backend as a stream (generators/synth/run.py `streamed`: an HTTP backend gets the next chunks' requests
while it answers the earlier ones, so the engine never waits on a chunk's end or a commit),
and one task per chunk commits its trajectories once its own answers are in, in order
(model texts: a shard per chunk; template texts: shards of TEMPLATE_SHARD rows, `committer`);
the run's id, lineage and tool bank are generators/synth/run.py's too.
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
from dataclasses import asdict, dataclass
from functools import partial
from itertools import islice
from typing import Callable

from tqdm.auto import tqdm

from flows.common import Stages, require_world, set_aside, tie_temporary_server
from flows.engine import flow, task
from flows.runners import RunnerConfig, cancel, workers_report_here
from generators.llm.base import Usage
from generators.llm.kinds import SHIP, kinds_with
from generators.llm.registry import BackendConfig, check_backend, make_backend
from generators.synth.assemble import traj_id_for
from generators.synth.run import build_bank, chunk_rows, committer, lineage_of, run_id_of, run_summary, streamed
from generators.synth.synthesize import Session, SynthConfig, load_inputs
from generators.synth.tally import Tally
from generators.tools.imported import imported_rows
from generators.tools.retriever import check_reachable, index_dir
from storage import ShardWriter, load_table, resolve_root, write_rows
from storage.idset import IdSet
from storage.journal import Journal, journal_path
from storage.runs import save_run_config


@task(name="load-inputs", retries=1)
def load_task(root: str, dataset: str):
    return load_inputs(root, dataset)


bank_task = task(name="build-tool-bank", retries=1)(build_bank)


@task(name="synthesize-chunk", retries=2, retry_delay_seconds=5)
def chunk_task(session: Session, plans, backend, root: str, dataset: str, run_id: str, lineage: dict,
               triple_ids: dict, commit: Callable[[list[dict]], int] | None = None) -> dict:
    """Generate one chunk's trajectories and commit them (with `commit`, the run's writer in
    the flow process; a worker commits the chunk as one shard on its own); its stats, with the
    backend usage of this chunk (a copy of the backend in a worker process counts there)."""
    used = backend.usage if backend is not None else None
    before = asdict(used) if used is not None else None
    rows, stats = session.trajectories(plans, backend, run_id)
    if used is not None:
        stats["usage"] = {k: v - before[k] for k, v in asdict(backend.usage).items()}
    commit = commit or partial(write_rows, root, dataset, "trajectories", run_id, lineage=lineage)
    return chunk_rows(rows, lineage, triple_ids, stats, commit)


@task(name="commit-chunk", retries=2, retry_delay_seconds=5)
def commit_task(session: Session, prep, outs, llm_s: float, run_id: str, lineage: dict, triple_ids: dict,
                commit: Callable[[list[dict]], int]) -> dict:
    """A chunk's rows from its answers (`outs`; None: template texts), committed with the
    run's writer; its stats."""
    rows, stats = session.finish(prep, outs, run_id, llm_s)
    return chunk_rows(rows, lineage, triple_ids, stats, commit)


@dataclass
class Prepared:
    """What a run's chunks need, made before the first one: the plan and its context."""

    session: Session
    run_id: str
    lineage: dict
    backend: object
    journal: Journal | None
    triple_ids: dict
    planned: int
    done: IdSet


def prepare(cfg: SynthConfig, bcfg: BackendConfig, root: str, fan_out: bool, stages: Stages) -> Prepared:
    """Load the inputs, check that the triples allow --n (before the bank is gated and any
    model loads), open the backend and its journal, build the tool bank and plan the run; each
    step a row of `stages`."""
    imported = imported_rows(load_table(cfg.dataset, "tools", root).to_pylist())  # `forgeplay tools import`
    from generators.tools.banks import resolve_choice

    bank = resolve_choice(cfg.tools, load_table(cfg.dataset, "documents", root, columns=["source"])
                          .column("source").unique().to_pylist())
    run_id = run_id_of(cfg, bcfg, imported, bank)
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
    lineage = lineage_of(cfg, bcfg, be)
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
    return Prepared(session, run_id, lineage, be, journal, {tr["triple_id"]: tr["id"] for tr in inputs.triples},
                    planned, done)


def run_chunks(cfg: SynthConfig, root: str, p: Prepared, fan_out: bool, workers: int, tally: Tally, bar) -> int:
    """The chunks of the plans not committed yet: fanned out to `workers` (at most two each in
    flight, memory bounded) or streamed through the backend and committed in order; each
    chunk's stats added to `tally` in order. The trajectories handed out."""
    be = p.backend
    todo = (x for x in p.session.picks() if traj_id_for(p.run_id, x.triple_id, x.case, x.variant) not in p.done)
    writer = None if fan_out else committer(root, cfg.dataset, p.run_id, p.lineage, cfg.texts)
    if writer is None:
        commit = None
    elif isinstance(writer, ShardWriter):
        commit = writer.write
    else:
        commit = partial(writer.commit, cfg.dataset, "trajectories")
    in_flight, written = deque(), 0  # (size, stats or their future) of chunks not added yet

    def add_oldest() -> None:
        size, out = in_flight.popleft()
        stats = out.result() if fan_out else out
        tally.add(stats)
        if fan_out and "usage" in stats:  # the flow's backend did not see a worker's calls
            be.usage.add(Usage(**stats["usage"]))
        bar.update(size)
        if be is not None and be.usage.seconds:
            bar.set_postfix(tok_s=f"{be.usage.completion_tokens / be.usage.seconds:.0f}")

    try:
        if fan_out:
            while chunk := list(islice(todo, cfg.chunk)):
                written += len(chunk)
                args = (p.session, chunk, be, root, cfg.dataset, p.run_id, p.lineage, p.triple_ids)
                in_flight.append((len(chunk), chunk_task.submit(*args)))
                while len(in_flight) >= 2 * workers:  # workers stay busy, memory bounded
                    add_oldest()
        else:
            for n, prep, outs, waited in streamed(p.session, todo, be, cfg.chunk):
                written += n
                in_flight.append((n, commit_task(p.session, prep, outs, waited, p.run_id, p.lineage, p.triple_ids,
                                                 commit)))
                add_oldest()
        while in_flight:
            add_oldest()
        if isinstance(writer, ShardWriter):
            writer.close()  # the last template shard
    finally:
        cancel([out for _, out in in_flight] if fan_out else [])
    return written


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
    stages, t0, tally = Stages(), time.perf_counter(), Tally()
    with set_aside() as setup:
        return _synthesize(cfg, bcfg, root, setup(prepare, cfg, bcfg, root, fan_out, stages), fan_out, workers,
                           progress, stages, t0, tally)


def _synthesize(cfg: SynthConfig, bcfg: BackendConfig, root: str, p: Prepared, fan_out: bool, workers: int,
                progress: bool, stages: Stages, t0: float, tally: Tally) -> dict:
    """The flow after its set-up: the chunks, the run's summary and report."""
    be, journal = p.backend, p.journal
    with tqdm(total=max(0, p.planned - len(p.done)), desc="synthesize", unit="traj", disable=not progress) as bar:
        try:
            written = run_chunks(cfg, root, p, fan_out, workers, tally, bar)
        except BaseException:
            if be is not None:
                be.close()
            if journal is not None:
                journal.close()  # kept: a rerun reads its answers back
            raise
    usage = be.usage.to_dict() if be is not None else {}
    if be is not None:
        be.close()
    if journal is not None:
        journal.remove()  # every answer it holds is in a committed row now

    wall = time.perf_counter() - t0
    stages.add("synthesize", written, written, tally.llm_s + tally.program_s,
               f"LLM {tally.llm_s:.1f}s, program {tally.program_s:.2f}s, {tally.slots} texts")
    stages.add("write", rows_out=written, seconds=tally.write_s)
    summary = run_summary(cfg, p.run_id, p.session, tally, p.planned, written, usage, wall)
    save_run_config(root, cfg.dataset, p.run_id, {"synth": asdict(cfg), "backend": bcfg.to_dict()},
                    extra={"summary": summary})
    summary["report"] = stages.publish("synthesize-report", f"synthesize {cfg.dataset} ({p.run_id})",
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
    if fan_out and cfg.texts == "llm" and bcfg.backend not in kinds_with(SHIP):
        raise ValueError(f"fanning out (--workers {workers}, --task-runner {runner.task_runner}) sends each chunk "
                         f"to another process, and the {bcfg.backend} backend's model cannot go along: use "
                         f"--texts template or --backend {' or '.join(kinds_with(SHIP))}")
    check_inputs(cfg, bcfg, root)
    with workers_report_here(runner, workers):
        return flow(asdict(cfg), bcfg.to_dict(), str(root), progress, asdict(runner), workers)

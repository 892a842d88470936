"""The `validate` Prefect flow: records (a dataset's trajectories/tasks/triples, or a user's
JSONL/Parquet file) -> `verdicts` rows for every check + the accepted records as shards.

Accepted records go to dataset `<dataset>_valid` (or --out-dataset) under kind `<kind>`, keeping
their original id; verdicts go to the input dataset (with --input: to --out-dataset).

Orchestration only; the run itself (reading chunks, resuming, the shared checks, commits)
is validators/run.py. Per chunk: the per-record checks (schema, rules) run as a
`validate-records` task on a pool of N processes (`--workers N`, a few chunks in flight
at once; with one worker they are a plain call in the flow thread), or on a Dask or Ray
cluster (`--task-runner dask|ray [--address ADDR]`, flows/runners.py); then, in the flow
process and in record order, the shared checks (model layers with one backend, dedup)
and `validate-commit`, which commits the accepted shard first, then the verdict shard
(with one worker on the task runner's one thread, in order, overlapping the next chunk's
checks). A rerun of the same config skips records whose verdicts are committed, so a kill + rerun leaves no
duplicates, and results depend neither on N nor on the task runner.

    forgeplay validate --dataset demo --layers schema,rules,dedup --workers 2
    forgeplay validate --dataset demo --task-runner dask --workers 2
    forgeplay validate --input other.jsonl --kind trajectories --out-dataset theirs
    forgeplay validate --list-checks
"""

from __future__ import annotations

import sys
from collections import Counter, deque
from contextlib import contextmanager, nullcontext
from dataclasses import asdict

from tqdm.auto import tqdm

from flows.common import Stages, tie_temporary_server
from flows.engine import flow, one_thread, task
from flows.runners import RunnerConfig, cancel, workers_report_here
from generators.llm.registry import BackendConfig
from storage import resolve_root
from validators.run import ValidationRun, check_inputs
from validators.validator import ValidateConfig, check_chunk


class Opaque:
    """A task argument or result Prefect passes along without walking it: its input and
    result walkers visit every element of nested lists and dicts, which for a chunk of
    records costs about as much as the checks themselves. It pickles with its value (how
    process pools and Dask or Ray workers receive it)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


@task(name="validate-records", retries=1)
def records_task(records: Opaque, config: dict, root: str, fingerprint: str) -> Opaque:
    """The per-record checks over one chunk; runs on the flow's task runner (in a worker
    process with --workers N > 1 or a Dask/Ray worker), building its RuleContext once per
    process from the data root: it needs nothing else of the flow process."""
    return Opaque(check_chunk(records.value, config, root, fingerprint))


@task(name="validate-commit", retries=1)
def commit_task(run: Opaque, commit: Opaque) -> tuple[int, int]:
    """Commit one chunk: the accepted shard first, then the verdict shard (rows already
    committed are skipped by id, so a retry writes only what is missing)."""
    return run.value.commit(commit.value)


class Done:
    """A chunk checked already in the flow thread, as a future."""

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


def check(records, job: ValidationRun, fan_out: bool):
    """The per-record checks of one chunk as a future: a `validate-records` task on the
    task runner when the flow fans out (--workers N > 1, Dask, Ray); else a plain call in
    the flow thread, one chunk after another (a second thread would not check any sooner,
    the checks hold the interpreter lock; and a task run per chunk cost 4% of the run,
    measured with benchmarks/bench_validate.py)."""
    if not fan_out:
        with job.phase("per-record checks"):
            return Done(Opaque(check_chunk(records, *job.task_args)))
    return records_task.submit(Opaque(records), *job.task_args)


@contextmanager
def short_switches(seconds: float = 0.0005):
    """A shorter interpreter switch interval while checks (flow thread) and commits (writer
    thread) share the process: each of a commit's short native calls gives up the lock,
    and taking it back from a busy thread waits out the interval (5 ms by default).
    Measured: a chunk's commit beside a busy thread took 1.1 s with 5 ms, 0.23 s with
    0.5 ms, 0.08 s alone."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


@flow(name="validate", log_prints=True, task_runner=one_thread)
def validate_flow(config: dict, backend: dict, data_root: str | None = None, progress: bool = True,
                  runner: dict | None = None) -> dict:
    """Validate records with the layers of `config` (ValidateConfig fields). `run` puts the
    flow on the task runner of `runner` (RunnerConfig fields) and `workers`; called
    directly (e.g. as a subflow) it uses one thread. When the run does not fan out (the
    default runner, one worker) the checks run in the flow thread and the commits, in order,
    on the runner's one thread (Parquet encoding and fsync overlap the next chunk's checks);
    otherwise the checks run on the task runner and the commits in the flow thread."""
    tie_temporary_server()
    job = ValidationRun(ValidateConfig(**config), BackendConfig(**backend), resolve_root(data_root))
    fan_out = RunnerConfig(**(runner or {})).fans_out(job.cfg.workers)
    window = max(2, 2 * job.cfg.workers)  # chunks in flight: workers stay busy, memory stays bounded
    writer = not fan_out
    pending: deque = deque()  # (chunk, future of its checks)
    commits: deque = deque()  # commits in flight on the writer thread
    bar = tqdm(total=job.rows_in, desc="validate", unit="rec", disable=not progress)

    def wait_commit() -> None:
        with job.phase("wait for commits"):
            commits.popleft().result()

    def finish_oldest() -> None:
        chunk, future = pending.popleft()
        with job.phase("wait for per-record checks"):
            checked = future.result().value if future is not None else None
        commit = job.finish(chunk, checked)
        if commit is not None and writer:
            commits.append(commit_task.submit(Opaque(job), Opaque(commit)))
            while len(commits) > 2:
                wait_commit()
        elif commit is not None:
            commit_task(Opaque(job), Opaque(commit))
        bar.update(chunk.size)

    try:
        with short_switches() if writer else nullcontext():
            for chunk in job.chunks():
                future = check(chunk.todo, job, fan_out) if len(chunk.todo) else None
                pending.append((chunk, future))
                if len(pending) >= window:
                    finish_oldest()
            while pending:
                finish_oldest()
            while commits:
                wait_commit()
    finally:
        bar.close()
        cancel([f for _, f in pending if f is not None] + list(commits))
        job.close_backend()

    summary = job.close()
    stages = Stages()
    for row in job.layer_rows(summary["funnel"]):
        stages.add(row["stage"], row["rows_in"], row["rows_out"])
    for name, seconds in summary["seconds_by_phase"].items():
        stages.add(name, seconds=seconds, notes="writer thread" if writer and name == "commit" else "flow process")
    reasons = Counter({f"{f['layer']}/{f['reason']}": f["rejected"] for f in summary["funnel"] if f["reason"]})
    skipped = {f"{s['layer']}/{s['check']}/{s['reason']}": s["records"] for s in summary["skipped_checks"]}
    summary["report"] = stages.publish("validate-report", f"validate {job.verdict_ds} ({job.run_id})",
                                       {"rejects by layer/reason": dict(reasons),
                                        "checks passed without running (--strict rejects)": skipped})
    return summary


def flow_for(cfg: ValidateConfig, bcfg: BackendConfig | None = None, runner: RunnerConfig | None = None):
    """The flow on the task runner of `runner` (default: threads, or a pool of `cfg.workers`
    processes) (what `run` calls and `forgeplay serve` deploys; pass the same `runner` as
    the flow's parameter)."""
    return validate_flow.with_options(task_runner=(runner or RunnerConfig()).make(cfg.workers))


def run(cfg: ValidateConfig, bcfg: BackendConfig | None = None, data_root=None, progress: bool = True,
        runner: RunnerConfig | None = None) -> dict:
    """Check the options and what they name (the task runner, then validators.run.check_inputs),
    before any model loads or Prefect server starts; then run the flow: on `runner`'s task
    runner when it fans out (a Prefect flow run), else as flows/engine.py decides. The data
    root is made absolute: a Dask or Ray worker need not share the flow's working directory."""
    runner, bcfg = runner or RunnerConfig(), bcfg or BackendConfig()
    root = resolve_root(data_root).absolute()
    fan_out = runner.fans_out(cfg.workers)
    flow = flow_for(cfg, bcfg, runner) if fan_out else validate_flow  # a missing extra fails here
    check_inputs(cfg, bcfg, root)
    with workers_report_here(runner, cfg.workers):
        return flow(asdict(cfg), bcfg.to_dict(), str(root), progress, asdict(runner))

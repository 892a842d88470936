"""The `validate` Prefect flow: records (a dataset's trajectories/tasks/triples, or a user's
JSONL/Parquet file) -> `verdicts` rows for every check + the accepted records as shards.

Accepted records go to dataset `<dataset>_valid` (or --out) under kind `<kind>`, keeping
their original id; verdicts go to the input dataset (with --input: to --out).

Per chunk: the schema and rule layers run as a `validate-records` task on the flow's task
runner (`--workers N`: threads for 1, a pool of N processes otherwise; a few chunks are in
flight at once); then, in the flow process and in record order, the model layers (one
backend, loaded once), dedup and `validate-commit`, which commits the accepted shard first,
then the verdict shard. A rerun of the same config skips records whose verdicts are
committed, so a kill + rerun leaves no duplicates, and results do not depend on N.

    forgeplay validate --dataset demo --layers schema,rules,dedup --workers 2
    forgeplay validate --input other.jsonl --kind trajectories --out theirs
"""

from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict

import pyarrow as pa
from prefect import flow, task
from prefect.cache_policies import NONE
from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner
from tqdm.auto import tqdm

from flows.common import publish_artifact
from generators.llm.registry import BackendConfig, make_backend
from storage import Catalog, ShardWriter, load_schema, load_table, resolve_root
from storage.runs import config_hash, save_run_config
from storage.funnel import funnel_sql
from storage.shards import stamp
from validators.context import corpus_fingerprint, rule_context
from validators.runner import PER_RECORD, ValidateConfig, Validator, check_records, raw_id, read_input


class Opaque:
    """A task argument or result Prefect passes along without walking it: its input and
    result walkers visit every element of nested lists and dicts, which for a chunk of
    records costs about as much as the checks themselves."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


@task(name="validate-records", cache_policy=NONE, retries=1)
def records_task(records: Opaque, kind: str, layers: list[str], all_layers: bool, root: str, dataset: str | None,
                 fingerprint: str, answer_min_f1: float, replay: bool) -> Opaque:
    """Schema and rule layers over one chunk; runs on the flow's task runner (in a worker
    process with --workers N > 1), building its RuleContext once per process."""
    ctx = rule_context(root, dataset, fingerprint, answer_min_f1, replay)
    return Opaque(check_records(records.value, kind, layers, ctx, all_layers))


def checked_table(rows: list[dict], kind: str, run_id: str, lineage: dict) -> pa.Table:
    """Rows already checked against the kind's JSON Schema (accepted records passed the
    schema layer; verdict rows are built by Verdict.row) as an Arrow table, so the shard
    writer checks only types and nulls instead of rerunning the jsonschema interpreter,
    which costs ~1 ms per trajectory (20x the schema and rule layers)."""
    schema = load_schema(kind)
    return pa.Table.from_pylist(stamp(rows, schema, run_id, lineage), schema=schema.arrow)


class Writers:
    """One ShardWriter per (dataset, kind) for the whole flow; `commit` publishes what it
    buffered (ShardWriter.close) and the writer stays usable. A writer per chunk would
    re-read every committed id of the run each time (quadratic in the run's size)."""

    def __init__(self, root: str, run_id: str, lineage: dict):
        self.root, self.run_id, self.lineage = root, run_id, lineage
        self.open: dict[tuple[str, str], ShardWriter] = {}

    def commit(self, dataset: str, kind: str, rows) -> None:
        key = (dataset, kind)
        if key not in self.open:
            self.open[key] = ShardWriter(self.root, dataset, kind, self.run_id, lineage=self.lineage)
        try:
            self.open[key].write(rows)
            self.open[key].close()
        except BaseException:  # a retry starts a fresh writer, which re-reads what is committed
            self.open.pop(key, None)
            raise


@task(name="validate-commit", cache_policy=NONE, retries=1)
def commit_task(writers: Opaque, rows: Opaque, accepted: Opaque, verdict_ds: str, accepted_ds: str, kind: str,
                schema_checked: bool) -> tuple[int, int]:
    """Commit one chunk: the accepted shard first, then the verdict shard (a rerun skips
    records whose verdicts are committed; rows already committed are skipped by id)."""
    w: Writers = writers.value
    if accepted.value:
        acc = [{**a, "lineage": {**w.lineage, "parent_ids": [a["id"]]}} for a in accepted.value]
        w.commit(accepted_ds, kind, checked_table(acc, kind, w.run_id, w.lineage) if schema_checked else acc)
    w.commit(verdict_ds, "verdicts", checked_table(rows.value, "verdicts", w.run_id, w.lineage))
    return len(rows.value), len(accepted.value)


def task_runner(workers: int):
    """Threads in the flow process for 1 worker, else a pool of `workers` processes."""
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    return ThreadPoolTaskRunner(max_workers=1) if workers == 1 else ProcessPoolTaskRunner(max_workers=workers)


@flow(name="validate", log_prints=True, task_runner=ThreadPoolTaskRunner(max_workers=1))
def validate_flow(config: dict, backend: dict, data_root: str | None = None, progress: bool = True) -> dict:
    """Validate records with the layers of `config` (ValidateConfig fields). `run` picks the
    task runner for `workers`; called directly (e.g. as a subflow) it uses one thread."""
    cfg, bcfg = ValidateConfig(**config), BackendConfig(**backend)
    root = str(resolve_root(data_root))
    layers = cfg.layer_list()
    if cfg.chunk < 1 or cfg.workers < 1:
        raise ValueError(f"--chunk and --workers must be >= 1, got {cfg.chunk} and {cfg.workers}")
    uses_model = "judge" in layers or "answerability" in layers
    identity = {k: v for k, v in asdict(cfg).items() if k != "workers"}  # results do not depend on workers
    run_id = cfg.run_id or f"validate-{config_hash({'v': identity, 'b': bcfg.config_hash() if uses_model else None})}"
    t0 = time.perf_counter()
    seconds: Counter = Counter()

    @contextmanager
    def phase(name: str):  # wall seconds of the flow process per phase (in the summary)
        t = time.perf_counter()
        try:
            yield
        finally:
            seconds[name] += time.perf_counter() - t

    if cfg.input:
        if not cfg.out:
            raise ValueError("--input needs --out (the dataset that receives verdicts and accepted records)")
        raw = read_input(cfg.input)
        verdict_ds = accepted_ds = cfg.out
    else:
        if not cfg.dataset:
            raise ValueError("give --dataset or --input")
        with phase("read"):
            raw = load_table(cfg.dataset, cfg.kind, root).to_pylist()
        if not raw:
            raise ValueError(f"dataset {cfg.dataset!r} has no {cfg.kind} rows under {root}")
        verdict_ds, accepted_ds = cfg.dataset, cfg.out or f"{cfg.dataset}_valid"
    records = [(raw_id(r), r) for r in raw]
    fingerprint = corpus_fingerprint(root, cfg.dataset)
    documents = {}
    if "answerability" in layers:
        documents = rule_context(root, cfg.dataset, fingerprint, cfg.answer_min_f1, cfg.replay).documents or {}
    be = make_backend(bcfg) if uses_model else None
    validator = Validator(cfg, cfg.kind, backend=be, documents=documents)
    lineage = {"model": str(getattr(be, "model", None)) if be else None, "backend": bcfg.backend if be else None,
               "config_hash": config_hash(identity), "parent_ids": []}

    done = set(load_table(verdict_ds, "verdicts", root, run_id=run_id, columns=["record_id"]).column("record_id").to_pylist())
    kept = set(load_table(accepted_ds, cfg.kind, root, run_id=run_id, columns=["id"]).column("id").to_pylist()) \
        if done else set()
    chunks = [records[i:i + cfg.chunk] for i in range(0, len(records), cfg.chunk)]
    todos = [[(rid, r) for rid, r in c if rid not in done] for c in chunks]
    per_record = [x for x in layers if x in PER_RECORD]
    window = max(2, 2 * cfg.workers)  # chunks in flight: workers stay busy, memory stays bounded
    futures: dict[int, object] = {}

    def submit(j: int) -> None:
        if todos[j] and j not in futures:
            futures[j] = records_task.submit(Opaque(todos[j]), cfg.kind, per_record, cfg.all_layers, root,
                                             cfg.dataset, fingerprint, cfg.answer_min_f1, cfg.replay)

    writers = Opaque(Writers(root, run_id, lineage))
    written = accepted = skipped = 0
    bar = tqdm(total=len(records), desc="validate", unit="rec", disable=not progress)
    try:
        for j, chunk in enumerate(chunks):
            for k in range(j, min(j + window, len(chunks))):
                submit(k)
            for rid, r in chunk:  # committed earlier: its accepted records join the dedup index, in order
                if rid in done:
                    skipped += 1
                    if rid in kept:
                        validator.remember(rid, r)
            if todos[j]:
                with phase("wait for schema+rules tasks"):
                    checked = futures.pop(j).result()
                with phase("model layers + dedup"):
                    rows, acc = validator.finish(todos[j], checked.value)
                with phase("commit"):
                    n_v, n_a = commit_task(writers, Opaque(rows), Opaque(acc), verdict_ds, accepted_ds, cfg.kind,
                                           "schema" in layers)
                written, accepted = written + n_v, accepted + n_a
            bar.update(len(chunk))
    finally:
        bar.close()
        for f in futures.values():  # chunks still queued after an error need not run
            wrapped = getattr(f, "wrapped_future", None)
            if wrapped is not None:
                wrapped.cancel()
        if be is not None:
            be.close()

    with Catalog(root) as cat:
        cols = ["layer", "check", "reason", "rejected", "rows_in", "rows_out"]
        funnel = [dict(zip(cols, r[:6])) for r in cat.rows(funnel_sql(verdict_ds, run_id))]
        reasons = Counter({f"{f['layer']}/{f['reason']}": f["rejected"] for f in funnel if f["reason"]})
        total_acc = cat.scalar(f'SELECT count(*) FROM "{accepted_ds}_{cfg.kind}" WHERE run_id = ?', [run_id]) \
            if f"{accepted_ds}_{cfg.kind}" in cat.views else 0
    wall = time.perf_counter() - t0
    first: dict[str, dict] = {}  # the first funnel row of each verdict layer ("dedup" is layer "dataset")
    for f in funnel:
        first.setdefault(f["layer"], f)
    stages = [{"stage": layer, **{k: first.get("dataset" if layer == "dedup" else layer, {}).get(k, 0)
                                  for k in ("rows_in", "rows_out")}} for layer in layers]
    summary = {"run_id": run_id, "verdict_dataset": verdict_ds, "accepted_dataset": accepted_ds, "kind": cfg.kind,
               "rows_in": len(records), "rows_out": total_acc, "accepted_this_run": accepted,
               "skipped_committed": skipped, "verdicts_written": written, "funnel": funnel, "workers": cfg.workers,
               "seconds_by_phase": {k: round(v, 3) for k, v in seconds.items()},
               "seconds": wall, "records_per_s": (len(records) - skipped) / wall if wall else 0.0}
    save_run_config(root, verdict_ds, run_id, {"validate": asdict(cfg), "backend": bcfg.to_dict()},
                    extra={"summary": {k: v for k, v in summary.items() if k != "funnel"}})
    summary["report"] = publish_artifact("validate-report", f"validate {verdict_ds} ({run_id})", stages,
                                         {"rejects by layer/reason": dict(reasons)})
    return summary


def run(cfg: ValidateConfig, bcfg: BackendConfig | None = None, data_root=None, progress: bool = True) -> dict:
    """Run the flow on the task runner for `cfg.workers` (Prefect's temporary local server
    when no PREFECT_API_URL is set)."""
    return validate_flow.with_options(task_runner=task_runner(cfg.workers))(
        asdict(cfg), (bcfg or BackendConfig()).to_dict(), str(data_root) if data_root else None, progress)

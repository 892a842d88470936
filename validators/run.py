"""One `validate` run, without Prefect: what it reads, skips, checks in record order and
commits. The flow (flows/validate.py) only orchestrates: it takes `chunks()` in order, runs
`check_chunk(chunk.todo, *run.task_args)` on its task runner, then `finish` (the shared
checks, in record order) and `commit` (the accepted shard first, then the verdicts).

Chunks are read lazily from the dataset's shards (storage.reader.iter_tables) and stay
Arrow tables to the commit: the checks see Python rows converted once per chunk, and the
accepted rows are taken from the chunk's table by index. A user's --input file is read
whole, as before.

Resume: the run id is a hash of the config (workers left out), so a rerun of the same
config finds what it committed (storage.resumable.RunWriter): records with committed
verdicts are skipped, and those it accepted join the shared checks' state (the dedup index)
in record order, just before the rest of their chunk is checked. A kill between a chunk's
two commits leaves its verdicts uncommitted, so the rerun redoes the chunk and the writer
skips the accepted rows it has: no duplicates.

    run = ValidationRun(ValidateConfig(dataset="demo"), BackendConfig(), root)
    for chunk in run.chunks():
        run.commit(run.finish(chunk, check_chunk(chunk.todo, *run.task_args)))
    summary = run.close()
"""

from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from generators.llm.registry import BackendConfig, check_backend, make_backend
from generators.tools.retriever import check_reachable, check_spec
from storage import Catalog
from storage.heap import trim
from storage.idset import IdSet
from storage.journal import Journal, journal_path
from storage.reader import entries, iter_tables, prefetched, require_rows
from storage.resumable import RunWriter
from storage.runs import config_hash, save_run_config, without_later_defaults
from storage.schema import SHARED_COLUMNS
from validators.context import corpus_fingerprint, rule_context
from validators.judge import JUDGED
from validators.reasons import SKIPPED
from validators.records import Records, gc_paused, read_input
from validators.registry import CHECKS, uses_backend
from validators.validator import LATER_DEFAULTS, Checked, ValidateConfig, Validator


@dataclass
class Chunk:
    """A chunk's records still to check (`todo`), and those this run accepted before a
    restart (`kept`, for the shared checks' state)."""

    size: int
    todo: Records
    kept: Records | None


@dataclass
class Commit:
    """What `finish` hands to `commit`: the chunk's verdict rows and its accepted rows."""

    verdicts: pa.Table
    accepted: pa.Table | list[dict]
    trusted: bool  # the accepted rows passed the schema layer


def check_inputs(cfg: ValidateConfig, bcfg: BackendConfig, root) -> None:
    """What a run reads and the options that name it, checked before anything is loaded or
    started (one-line ValueError): the layers, --chunk and --workers, --input with --out-dataset and
    an existing file, or a --dataset with rows of --kind, a --corpus with documents, and the
    backend when a layer uses a model."""
    layers = cfg.layer_list()
    check_spec(cfg.retriever)
    if cfg.replay and "rules" in layers:
        check_reachable(cfg.retriever)
    if cfg.chunk < 1 or cfg.workers < 1:
        raise ValueError(f"--chunk and --workers must be >= 1, got {cfg.chunk} and {cfg.workers}")
    if cfg.input:
        if not cfg.out:
            raise ValueError("--input needs --out-dataset (the dataset that receives verdicts and accepted records)")
        if not Path(cfg.input).is_file():
            raise ValueError(f"no such input file: {cfg.input}")
    elif not cfg.dataset:
        raise ValueError("give --dataset or --input")
    else:
        require_rows(root, cfg.dataset, cfg.kind)
    if cfg.corpus:
        try:
            require_rows(root, cfg.corpus, "documents", "--corpus")
        except ValueError as e:
            raise ValueError(f"{e}; import one with `forgeplay corpus import`") from None
    for f in cfg.heldout:
        if not Path(f).is_file():
            raise ValueError(f"--heldout: no such file: {f}")
    if uses_backend(layers):
        check_backend(bcfg)


class ValidationRun:
    """One run of the validate flow (see the module docstring)."""

    def __init__(self, cfg: ValidateConfig, bcfg: BackendConfig, root: str):
        self.t0 = time.perf_counter()
        self.cfg, self.bcfg, self.root = cfg, bcfg, str(root)
        check_inputs(cfg, bcfg, root)
        self.layers = cfg.layer_list()
        model = uses_backend(self.layers)
        # results do not depend on workers; options added later leave the id of a run made before them alone
        identity = without_later_defaults({k: v for k, v in asdict(cfg).items() if k != "workers"}, LATER_DEFAULTS)
        if "judge" not in self.layers:  # judge_strict (now judge_lenient) at its old default: runs keep their ids
            identity["judge_strict"] = False
        self.run_id = cfg.run_id or f"validate-{config_hash({'v': identity, 'b': bcfg.config_hash() if model else None})}"
        if cfg.input:
            self.values = read_input(cfg.input)
            self.rows_in = len(self.values)
            self.verdict_ds = self.accepted_ds = cfg.out
        else:
            self.rows_in = sum(e.rows for e in entries(self.root, cfg.dataset, cfg.kind))
            self.verdict_ds, self.accepted_ds = cfg.dataset, cfg.out or f"{cfg.dataset}_valid"
        corpus = cfg.corpus_dataset()
        self.fingerprint = corpus_fingerprint(self.root, corpus)
        # answers the model layers paid for are journaled as they arrive: a killed run asks none twice
        self.journal = Journal(journal_path(self.root, self.verdict_ds, self.run_id)) if model else None
        self.backend = make_backend(bcfg, journal=self.journal) if model else None
        try:
            self.validator = Validator(cfg, cfg.kind, backend=self.backend, corpus=lambda: rule_context(
                self.root, corpus, self.fingerprint, cfg.answer_min_f1, cfg.replay, cfg.final_facts, cfg.retriever))
        except BaseException:
            self.close_backend()
            raise
        self.writer = RunWriter(self.root, self.run_id, {
            "model": str(self.backend.model) if self.backend else None,
            "backend": bcfg.backend if self.backend else None, "config_hash": config_hash(identity)})
        self.done = IdSet(self.writer.committed(self.verdict_ds, "verdicts", "record_id"))
        self.kept = IdSet(self.writer.committed(self.accepted_ds, cfg.kind) if len(self.done) else ())
        if cfg.judge_sample > 0 and "judge" in self.layers and len(self.done):  # --judge-sample counts what it judged
            layers = self.writer.committed(self.verdict_ds, "verdicts", "layer")
            self.validator.ctx.state[JUDGED] = int(pc.sum(pc.equal(layers, "judge")).as_py() or 0)
        self.seconds: Counter = Counter()
        self.skipped = self.written = self.accepted = 0
        self.failed: tuple[Commit, str] | None = None  # a commit that failed, and its error

    @property
    def task_args(self) -> tuple:
        """What `check_chunk` needs besides the records (plain values, for any process)."""
        return asdict(self.cfg), self.root, self.fingerprint

    @contextmanager
    def phase(self, name: str):
        """Wall seconds of the flow process per phase (in the summary)."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t

    def _parts(self) -> Iterator[Records]:
        cfg = self.cfg
        if cfg.input:
            for i in range(0, len(self.values), cfg.chunk):
                yield Records.of_values(self.values[i:i + cfg.chunk])
            return
        unused = [c for c in SHARED_COLUMNS if c != "id"]  # no check reads them; records keep their id
        for table in prefetched(iter_tables(cfg.dataset, cfg.kind, self.root, rows=cfg.chunk, drop=unused)):
            yield Records.of_table(table)

    def chunks(self) -> Iterator[Chunk]:
        """The chunks in record order; records with committed verdicts are left out of `todo`."""
        parts = self._parts()
        while True:
            with self.phase("read"):
                recs = next(parts, None)
                if recs is None:
                    return
                todo = [i for i, rid in enumerate(recs.ids) if rid not in self.done]
                kept = [i for i, rid in enumerate(recs.ids) if rid in self.done and rid in self.kept]
            self.skipped += len(recs) - len(todo)
            yield Chunk(len(recs), recs.take(todo), recs.take(kept) if kept else None)

    def finish(self, chunk: Chunk, checked: Checked | None) -> Commit | None:
        """The shared checks over a chunk whose per-record checks are done, in record order
        (after the records this run accepted before a restart join their state)."""
        with self.phase("shared checks"):
            if chunk.kept is not None:
                self.validator.remember(chunk.kept)
            if not len(chunk.todo):
                return None
            self.validator.finish(chunk.todo, checked)  # (model layers: the collector stays on)
        with self.phase("shared checks"), gc_paused():  # thousands of verdict rows, no cycles
            trusted = "schema" in self.layers
            accepted = chunk.todo.accepted(checked.accepted())
            if not trusted and isinstance(accepted, pa.Table):
                accepted = accepted.to_pylist()  # unchecked: the writer checks them against the JSON Schema
            return Commit(checked.table(), accepted, trusted)

    def commit(self, c: Commit) -> tuple[int, int]:
        """The accepted shard first, then the verdict shard; (verdict rows, accepted rows).
        Chunks commit in record order, and none after a failed one (commits queued on a
        writer thread behind it refuse): what a run committed is always its first chunks."""
        if self.failed is not None and self.failed[0] is not c:  # (a retry of the failed one may go)
            raise RuntimeError(f"not committed: an earlier chunk's commit failed ({self.failed[1]})")
        try:
            done = self._commit(c)
        except BaseException as e:
            self.failed = (c, f"{type(e).__name__}: {e}")
            raise
        self.failed = None
        return done

    def _commit(self, c: Commit) -> tuple[int, int]:
        with self.phase("commit"), gc_paused():
            n_acc = len(c.accepted)
            if n_acc:
                self.writer.commit(self.accepted_ds, self.cfg.kind, c.accepted, parents=True, trusted=c.trusted)
            if c.verdicts.num_rows:  # (a chunk the judge's sample left out has none)
                self.writer.commit(self.verdict_ds, "verdicts", c.verdicts)
            self.written, self.accepted = self.written + c.verdicts.num_rows, self.accepted + n_acc
            trim()  # what the chunks before left is garbage now: its pages go back (storage/heap.py)
            return c.verdicts.num_rows, n_acc

    def close_backend(self) -> None:
        if self.backend is not None:
            self.backend.close()
            self.backend = None
        if self.journal is not None:
            self.journal.close()

    def close(self) -> dict:
        """Save the run record and return the summary (with the run's funnel)."""
        self.close_backend()
        if self.journal is not None:
            self.journal.remove()  # every answer it holds is in a committed verdict now
        with Catalog(self.root) as cat:
            funnel = cat.funnel(self.verdict_ds, self.run_id)
            skipped = cat.passed_with(self.verdict_ds, sorted(SKIPPED), self.run_id)
        wall = time.perf_counter() - self.t0
        summary = {"run_id": self.run_id, "verdict_dataset": self.verdict_ds, "accepted_dataset": self.accepted_ds,
                   "kind": self.cfg.kind, "rows_in": self.rows_in,
                   "rows_out": self.writer.count(self.accepted_ds, self.cfg.kind),
                   "accepted_this_run": self.accepted, "skipped_committed": self.skipped,
                   "verdicts_written": self.written, "funnel": funnel, "skipped_checks": skipped,
                   "workers": self.cfg.workers,
                   "seconds_by_phase": {k: round(v, 3) for k, v in self.seconds.items()}, "seconds": wall,
                   "records_per_s": (self.rows_in - self.skipped) / wall if wall else 0.0}
        save_run_config(self.root, self.verdict_ds, self.run_id, {"validate": asdict(self.cfg), "backend": self.bcfg.to_dict()},
                        extra={"summary": {k: v for k, v in summary.items() if k != "funnel"}})
        return summary

    def layer_rows(self, funnel: list[dict]) -> list[dict]:
        """Rows in and out of each chosen layer, from the funnel (first row per verdict layer)."""
        first: dict[str, dict] = {}
        for f in funnel:
            first.setdefault(f["layer"], f)
        verdict_layer = {c.layer: c.verdict_layer or c.layer for c in CHECKS}
        return [{"stage": layer, **{k: first.get(verdict_layer[layer], {}).get(k, 0) for k in ("rows_in", "rows_out")}}
                for layer in self.layers]

"""Run the registered checks (validators/registry.py) over records: schema -> rules -> judge
-> answerability -> dedup, in layer order, with no per-layer code here.

A record leaves the running at its first failing check unless `all_layers` is set; every
check's verdict is kept as a `verdicts` row. Records that pass every enabled check are
"accepted". The per-record checks (`check_records`: schema, rules) are pure, so the flow
runs them in parallel tasks (`check_chunk` in any process); `Validator.finish` then runs
the shared checks (model layers with one backend, dedup) in record order, so results do
not depend on how the records were split. A chunk's verdicts are kept as plain tuples
(`Checked`, cheap to send back from a worker) and become one Arrow table for the commit.

    v = Validator(ValidateConfig(dataset="demo"), kind="trajectories", rule_ctx=RuleContext())
    verdict_rows, accepted = v.process(records)      # records: [(record_id, row_or_raw), ...]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from generators.tools.retriever import option as retriever_option
from validators.check import Check, CheckContext
from validators.context import rule_context
from validators.reasons import SKIPPED
from validators.records import Records, gc_paused, raw_id, read_input
from validators.registry import CHECKS, LAYERS, checks_for, layer_list
from validators.rule_context import RuleContext
from validators.verdict import Verdict, verdict_ids

__all__ = ["LATER_DEFAULTS", "LAYERS", "Checked", "ValidateConfig", "Validator", "check_chunk", "check_records", "raw_id", "read_input"]


@dataclass
class ValidateConfig:
    """What `forgeplay validate` checks and where it writes."""

    dataset: str | None = field(default=None, metadata={"help": "Dataset whose records are validated (verdicts go there too)."})
    kind: str = field(default="trajectories", metadata={"help": "Record kind: trajectories, tasks or triples."})
    input: str | None = field(default=None, metadata={"help": "Validate a FILE.jsonl or FILE.parquet instead of a dataset (needs --out-dataset)."})
    out: str | None = field(default=None, metadata={"flag": "out-dataset", "aliases": ("out",), "help": "Dataset for accepted records (default <dataset>_valid); with --input also for verdicts."})
    layers: str = field(default="schema,rules,dedup", metadata={"help": "Comma list of layers to run: schema,rules,judge,answerability,dedup."})
    all_layers: bool = field(default=False, metadata={"help": "Run every layer on every record instead of stopping at the first failing layer."})
    answer_min_f1: float = field(default=1.0, metadata={"help": "rules: accept a final answer with token F1 >= this even without exact match."})
    replay: bool = field(default=True, metadata={"help": "rules: replay tool calls with the simulator when documents and tools exist."})
    final_facts: bool = field(default=True, metadata={"help": "rules: reject a final think of a comparison, yes/no, computed or multi-hop answer that states no fact the answer follows from (validators/final_facts.py); --no-final-facts accepts data made with `synthesize --reasoning brief`."})
    corpus: str | None = field(default=None, metadata={"help": "Dataset whose documents and tool bank the rules read (replay, golden documents); default: --dataset. With --input, e.g. a corpus imported with `forgeplay corpus import`."})
    retriever: str = retriever_option()
    strict: bool = field(default=False, metadata={"help": "A check that could not run (e.g. replay with no corpus, document checks with unknown documents) rejects the record instead of passing it."})
    judge_threshold: float = field(default=0.5, metadata={"help": "judge: reject when the lowest turn score (0-1) is below this."})
    judge_lenient: bool = field(default=False, metadata={"help": "judge: pass a record whose judge reply has no readable score (by default it is a reject, judge_unparseable)."})
    judge_sample_rate: float = field(default=1.0, metadata={"help": "judge: fraction of records judged (deterministic by record id)."})
    judge_sample: int = field(default=0, metadata={"help": "judge: judge at most this many records of the run, the first the sample rate picks among those that reach the judge layer, in record order (0 = no limit)."})
    judge_max_tokens: int = field(default=48, metadata={"help": "judge: tokens per judge reply."})
    answer_distractors: int = field(default=3, metadata={"help": "answerability: distractor passages mixed into the golden context."})
    answer_check_f1: float = field(default=0.5, metadata={"help": "answerability: F1 at which a model reply counts as the answer."})
    dedup_threshold: float = field(default=0.8, metadata={"help": "dedup: estimated Jaccard at or above which a record is a near duplicate."})
    dedup_ngram: int = field(default=3, metadata={"help": "dedup: word n-gram size of the shingles."})
    heldout: list[str] = field(default_factory=list, metadata={"help": "dedup: held-out evaluation files (.jsonl/.json/.parquet/.txt) to check contamination against."})
    chunk: int = field(default=2000, metadata={"help": "Records per committed chunk (resume unit)."})
    workers: int = field(default=1, metadata={"help": "Processes for the schema and rule layers (Prefect task runner: 1 = threads in the flow process, N > 1 = a pool of N processes)."})
    seed: int = field(default=0, metadata={"help": "Seed for sampling and distractors."})
    run_id: str | None = field(default=None, metadata={"help": "Run id (default: validate-<config hash>)."})

    def layer_list(self) -> list[str]:
        return layer_list(self.layers)

    def corpus_dataset(self) -> str | None:
        """The dataset whose documents and tool bank the rules read."""
        return self.corpus or self.dataset


# options added after validate runs existed, with their default: at it they are left out of a
# run's id, so the command that made a run before them still names (and resumes) that run
LATER_DEFAULTS = {"final_facts": True, "judge_sample": 0, "judge_lenient": False, "retriever": "bm25"}


class Checked:
    """The verdicts of one chunk so far (one tuple per verdict, in COLUMNS order; `pos` is
    its record's position in the chunk), and whether each record is still in the running.
    Plain data, cheap to send back from a worker process."""

    COLUMNS = ("pos", "id", "layer", "check", "passed", "reason", "score", "detail")

    def __init__(self, ids: list[str], kind: str, strict: bool = False):
        self.ids, self.kind, self.strict = ids, kind, strict
        self.alive = [True] * len(ids)
        self.verdicts: list[tuple] = []

    def add(self, pos: int, vs: list[Verdict]) -> None:
        """Keep the verdicts of one check; a failed one takes the record out of the running
        (when strict, so does a check that passed without running: reasons.SKIPPED)."""
        keep = self.verdicts.append
        for v, vid in zip(vs, verdict_ids(self.ids[pos], self.kind, vs)):
            passed = bool(v.passed) and not (self.strict and v.code in SKIPPED)
            keep((pos, vid, v.layer, v.check, passed, v.code,
                  None if v.score is None else float(v.score), v.detail_text()))
            if not passed:
                self.alive[pos] = False

    def accepted(self) -> list[int]:
        return [i for i, a in enumerate(self.alive) if a]

    def table(self) -> pa.Table:
        """The verdict rows (content columns and id), record by record in chunk order."""
        n = len(self.verdicts)
        pos, vid, layer, check, passed, reason, score, detail = zip(*self.verdicts) if n else [()] * 8
        t = pa.table({"id": pa.array(vid, pa.string()), "record_id": pa.array([self.ids[p] for p in pos], pa.string()),
                      "record_kind": pa.repeat(pa.scalar(self.kind, pa.string()), n),
                      "layer": pa.array(layer, pa.string()), "check": pa.array(check, pa.string()),
                      "passed": pa.array(passed, pa.bool_()), "reason": pa.array(reason, pa.string()),
                      "score": pa.array(score, pa.float64()), "detail": pa.array(detail, pa.string())})
        order = np.argsort(np.asarray(pos, dtype=np.int64), kind="stable")
        return t if np.array_equal(order, np.arange(n)) else t.take(pa.array(order))

    def rows(self) -> list[dict]:
        """The verdict rows as dicts (Verdict.row's form)."""
        return self.table().to_pylist()


def run_check(check: Check, records: Records, checked: Checked, ctx: CheckContext, all_layers: bool) -> None:
    """One check over the records still in the running (all with `all_layers`) that it takes."""
    pos = [i for i, alive in enumerate(checked.alive)
           if (alive or all_layers) and (check.any_value or records.is_object(i))]
    if pos:
        for i, vs in zip(pos, check.run(records.take(pos), ctx)):
            checked.add(i, vs)


def check_records(records: Records, kind: str, layers: list[str], ctx: CheckContext, all_layers: bool = False,
                  registry: tuple[Check, ...] = CHECKS) -> Checked:
    """The per-record checks of `layers` for `kind` over `records`."""
    out = Checked(records.ids, kind, strict=bool(getattr(ctx.options, "strict", False)))
    with gc_paused():  # a chunk's rows are thousands of live objects each collection would walk
        for check in checks_for(layers, kind, registry):
            if check.per_record:
                run_check(check, records, out, ctx, all_layers)
        records.release()  # before the collector runs again
    return out


def check_chunk(records: Records, config: dict, root: str, fingerprint: str) -> Checked:
    """`check_records` for a run's config (ValidateConfig fields) in whatever process runs
    it: the RuleContext comes from this process's cache (validators/context.py)."""
    cfg = ValidateConfig(**config)
    ctx = CheckContext(cfg.kind, cfg, rules=rule_context(root, cfg.corpus_dataset(), fingerprint, cfg.answer_min_f1, cfg.replay,
                                                         cfg.final_facts, cfg.retriever))
    return check_records(records, cfg.kind, cfg.layer_list(), ctx, cfg.all_layers)


class Validator:
    """The checks of a config's layers for one record kind, with what they need; the
    shared checks are started once (e.g. the dedup index with its held-out files)."""

    def __init__(self, cfg: ValidateConfig, kind: str, rule_ctx: RuleContext | None = None, backend=None,
                 documents: dict[str, tuple[str, str]] | None = None, corpus=None,
                 registry: tuple[Check, ...] = CHECKS):
        self.cfg, self.kind, self.registry = cfg, kind, registry
        self.layers = cfg.layer_list()
        needs = [x for x in self.layers if any(c.layer == x and c.uses_backend for c in registry)]
        if needs and backend is None:
            raise ValueError(f"the {' and '.join(needs)} layer(s) need a backend")
        checks = checks_for(self.layers, kind, registry)
        self.shared = [c for c in checks if not c.per_record]
        self.ctx = CheckContext(kind, cfg, rules=rule_ctx or RuleContext(answer_min_f1=cfg.answer_min_f1, replay=cfg.replay,
                                                                         final_facts=cfg.final_facts),
                                backend=backend, documents=documents or {}, corpus=corpus)
        for c in self.shared:
            c.start(self.ctx)

    def check(self, records: Records) -> Checked:
        """The per-record checks, in this process."""
        return check_records(records, self.kind, self.layers, self.ctx, self.cfg.all_layers, self.registry)

    def remember(self, records: Records) -> None:
        """Records this run accepted before a restart join the shared checks' state (dedup index)."""
        for c in self.shared:
            c.remember(records, self.ctx)

    def finish(self, records: Records, checked: Checked) -> Checked:
        """The shared checks after the per-record ones, in record order."""
        for c in self.shared:
            run_check(c, records, checked, self.ctx, self.cfg.all_layers)
        return checked

    def process(self, records: list[tuple[str, object]]) -> tuple[list[dict], list[dict]]:
        """Verdict rows for `records` and the accepted rows (content fields, original id)."""
        recs = Records([rid for rid, _ in records], values=[r for _, r in records])
        checked = self.finish(recs, self.check(recs))
        return checked.rows(), recs.accepted(checked.accepted())

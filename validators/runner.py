"""Chain the layers over records: schema -> rules -> judge -> answerability -> dataset (dedup).

A record stops at its first failing layer unless `all_layers` is set; every check's verdict
is kept as a `verdicts` row. Records that pass every enabled layer are "accepted".
The per-record layers (`check_records`: schema, rules) need only plain inputs, so the flow
runs them in parallel tasks; `Validator.finish` then runs the model layers with one backend
and dedup in record order, so results do not depend on how the records were split.

    v = Validator(ValidateConfig(dataset="demo"), kind="trajectories", rule_ctx=RuleContext())
    verdict_rows, accepted = v.process(records)      # records: [(record_id, row_or_raw), ...]
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from storage.schema import SHARED_COLUMNS, record_id
from storage.userfiles import iter_records
from validators import answerability, judge
from validators import trajectory_rules as rules
from validators.dedup import Deduper, read_heldout, record_text
from validators.schema_layer import check_schema
from validators.verdict import Verdict

LAYER_ORDER = ("schema", "rules", "judge", "answerability", "dedup")
PER_RECORD = ("schema", "rules")  # layers that look at one record at a time (run in parallel tasks)


@dataclass
class ValidateConfig:
    """What `forgeplay validate` checks and where it writes."""

    dataset: str | None = field(default=None, metadata={"help": "Dataset whose records are validated (verdicts go there too)."})
    kind: str = field(default="trajectories", metadata={"help": "Record kind: trajectories, tasks or triples."})
    input: str | None = field(default=None, metadata={"help": "Validate a FILE.jsonl or FILE.parquet instead of a dataset (needs --out)."})
    out: str | None = field(default=None, metadata={"help": "Dataset for accepted records (default <dataset>_valid); with --input also for verdicts."})
    layers: str = field(default="schema,rules,dedup", metadata={"help": "Comma list of layers to run: schema,rules,judge,answerability,dedup."})
    all_layers: bool = field(default=False, metadata={"help": "Run every layer on every record instead of stopping at the first failing layer."})
    answer_min_f1: float = field(default=1.0, metadata={"help": "rules: accept a final answer with token F1 >= this even without exact match."})
    replay: bool = field(default=True, metadata={"help": "rules: replay tool calls with the simulator when documents and tools exist."})
    judge_threshold: float = field(default=0.5, metadata={"help": "judge: reject when the lowest turn score (0-1) is below this."})
    judge_strict: bool = field(default=False, metadata={"help": "judge: reject when a judge reply has no readable score."})
    judge_sample_rate: float = field(default=1.0, metadata={"help": "judge: fraction of records judged (deterministic by record id)."})
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
        names = [x.strip() for x in self.layers.split(",") if x.strip()]
        bad = [x for x in names if x not in LAYER_ORDER]
        if bad:
            raise ValueError(f"unknown layer(s) {bad}; choose from {', '.join(LAYER_ORDER)}")
        return [x for x in LAYER_ORDER if x in names]


def raw_id(raw) -> str:
    """Id of a record: its `id`, else the content hash; for non-objects a hash of the text."""
    if isinstance(raw, dict):
        rid = raw.get("id")
        if isinstance(rid, str) and rid:
            return rid
        try:
            return record_id(raw)
        except (TypeError, ValueError):
            pass
    return hashlib.sha256(repr(raw).encode()).hexdigest()[:32]


def read_input(path: str) -> list:
    """Records of a user file (storage/userfiles.py); what is not a record (a line that is
    not JSON, a JSON value that is not an object) stays as read, for the schema layer to reject."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"no such input file: {path}")
    return [r.record if r.record is not None else r.value if r.text is None else r.text for r in iter_records(p)]


@dataclass
class Checked:
    """Verdict rows so far per record id, and whether each record is still in the running.
    Plain data, so the per-record layers can run in another process and send it back."""

    rows: dict[str, list[dict]]
    alive: dict[str, bool]

    def add(self, rid: str, kind: str, vs: list[Verdict]) -> None:
        """Keep the verdicts of one layer; a failed one takes the record out of the running."""
        self.rows[rid].extend(v.row(rid, kind) for v in vs)
        if vs and not all(v.passed for v in vs):
            self.alive[rid] = False


def check_records(records: list[tuple[str, object]], kind: str, layers: list[str], ctx: rules.RuleContext,
                  all_layers: bool = False) -> Checked:
    """The per-record layers (schema, rules) of `layers` over `records`."""
    out = Checked({rid: [] for rid, _ in records}, {rid: True for rid, _ in records})
    for rid, r in records:
        for layer in (x for x in PER_RECORD if x in layers):
            if not (out.alive[rid] or all_layers):
                break
            if layer == "schema":
                vs = [check_schema(r, kind)]
            elif isinstance(r, dict):
                vs = rules.check_record(r, kind, ctx)
            else:
                continue
            out.add(rid, kind, vs)
    return out


class Validator:
    def __init__(self, cfg: ValidateConfig, kind: str, rule_ctx: rules.RuleContext | None = None,
                 backend=None, documents: dict[str, tuple[str, str]] | None = None):
        self.cfg, self.kind = cfg, kind
        self.layers = cfg.layer_list()
        self.ctx = rule_ctx or rules.RuleContext(answer_min_f1=cfg.answer_min_f1, replay=cfg.replay)
        self.backend, self.documents = backend, documents or {}
        if ("judge" in self.layers or "answerability" in self.layers) and backend is None:
            raise ValueError("the judge and answerability layers need a backend")
        self.deduper = Deduper(cfg.dedup_threshold, cfg.dedup_ngram) if "dedup" in self.layers else None
        if self.deduper is not None:
            for f in cfg.heldout:
                self.deduper.add_heldout(read_heldout(f), name=f"heldout:{Path(f).name}")
        self.funnel: Counter = Counter()

    def _sampled(self, rid: str) -> bool:
        if self.cfg.judge_sample_rate >= 1.0:
            return True
        h = int(hashlib.sha256(f"{self.cfg.seed}|{rid}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        return h < self.cfg.judge_sample_rate

    def remember(self, rid: str, row: dict) -> None:
        """Add an already accepted record to the dedup index (used when resuming)."""
        if self.deduper is not None and isinstance(row, dict):
            self.deduper.check(rid, record_text(row, self.kind))

    def process(self, records: list[tuple[str, object]]) -> tuple[list[dict], list[dict]]:
        """Verdict rows for `records` and the accepted rows (content fields, original id)."""
        return self.finish(records, check_records(records, self.kind, self.layers, self.ctx, self.cfg.all_layers))

    def finish(self, records: list[tuple[str, object]], checked: Checked) -> tuple[list[dict], list[dict]]:
        """The model layers (judge, answerability) and the dataset layer (dedup, in record
        order) after `check_records`; returns verdict rows and accepted rows."""
        rows, alive, kind = checked.rows, checked.alive, self.kind
        for layer in (x for x in self.layers if x not in PER_RECORD):
            batch = [(rid, r) for rid, r in records if (alive[rid] or self.cfg.all_layers) and isinstance(r, dict)]
            if layer == "judge" and self.kind == "trajectories":
                chosen = [(rid, r) for rid, r in batch if self._sampled(rid)]
                for (rid, _), v in zip(chosen, judge.judge_records([r for _, r in chosen], self.backend,
                                                                   self.cfg.judge_threshold, self.cfg.judge_strict,
                                                                   self.cfg.judge_max_tokens)):
                    checked.add(rid, kind, [v])
            elif layer == "answerability":
                for (rid, _), v in zip(batch, answerability.check_answerability(
                        [r for _, r in batch], self.kind, self.backend, self.documents, self.cfg.answer_distractors,
                        self.cfg.answer_check_f1, self.cfg.seed)):
                    checked.add(rid, kind, [v])
            elif layer == "dedup":
                for rid, r in batch:
                    try:
                        checked.add(rid, kind, [self.deduper.check(rid, record_text(r, kind))])
                    except Exception as e:  # data is data: reject, never crash
                        checked.add(rid, kind, [Verdict("dataset", "dedup", False, "check_crashed",
                                                        detail=f"{type(e).__name__}: {e}"[:300])])
        out_rows = [row for rid, _ in records for row in rows[rid]]
        accepted = [{**{k: v for k, v in r.items() if k not in SHARED_COLUMNS}, "id": rid}
                    for rid, r in records if alive[rid]]
        return out_rows, accepted

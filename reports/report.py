"""The run report: the sections asked for (by default every one of PARTS) built from the loop
run's record and data, the page rendered (reports/html.py) and written atomically to
`<root>/runs/<run_id>/report.html`. The loop asks for the sections its stages declare
(flows/loop_stages.py `report_parts`).

A section is a `Part`: a key, a title and `build(ctx) -> Section` (reports/run_sections.py,
reports/data_sections.py). A section whose data the run lacks raises `Absent` and shows as
one "not in this run" line; one whose data cannot be read shows the error in one line;
neither stops the others.

    write_report("data", "run-3f2a")                        # -> data/runs/run-3f2a/report.html
    write_report("data", "run-3f2a", out="r.html", tokenizer="models/base")
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import duckdb

from reports import data_sections, run_sections
from reports.context import Absent, RunContext
from reports.html import Section, render
from storage import loop_runs, manifest
from storage.files import write_text

REPORT = "report.html"


@dataclass(frozen=True)
class Part:
    key: str
    title: str
    build: Callable[[RunContext], Section]


PARTS = {p.key: p for p in (
    Part("stages", "Stages", run_sections.stages),
    Part("funnel", "Validation funnel", run_sections.funnel),
    Part("mixes", "Case, route and hop mix of the trajectories", data_sections.mixes),
    Part("tokens", "Trajectory lengths in tokens", data_sections.token_lengths),
    Part("curves", "Training curves", run_sections.curves),
    Part("eval", "Held-out exact match", run_sections.held_out),
    Part("labels", "Label spend per strategy", run_sections.label_spend),
    Part("examiner", "Examiner task difficulty by hop count", data_sections.examiner_difficulty),
    Part("shards", "Shard integrity", run_sections.shards),
)}

UNREADABLE = (KeyError, TypeError, ValueError, AttributeError, OSError, duckdb.Error)


def build(ctx: RunContext, parts: Sequence[Part]) -> list[Section]:
    """Every part's section (an absent or unreadable one as its one-line note)."""
    out = []
    for part in parts:
        try:
            section = part.build(ctx)
        except Absent as e:
            section = Section(absent=f"Not in this run: {e}.")
        except UNREADABLE as e:
            section = Section(absent=f"Could not be read: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        out.append(dataclasses.replace(section, key=part.key, title=part.title))
    return out


def _intro(record: dict) -> list[str]:
    cfg = record.get("config") or {}
    models = ", ".join(f"{k}: {v}" for k, v in (record.get("models") or {}).items())
    datasets = ", ".join(f"{k}: {v}" for k, v in (record.get("datasets") or {}).items())
    return [f"Status {record.get('status', '?')}; started {record.get('started_at', '?')}, "
            f"finished {record.get('finished_at') or '-'}; dataset {cfg.get('dataset', '?')}.",
            f"Datasets: {datasets or '-'}.", f"Models: {models or '-'}."]


def write_report(root, run_id: str, out: str | Path | None = None, tokenizer: str | None = None,
                 parts: Sequence[Part] | None = None) -> Path:
    """Write the report of loop run `run_id` with the sections `parts` (default: all PARTS);
    FileNotFoundError naming the runs there are when it has no record; its path."""
    root = manifest.resolve_root(root)
    record = loop_runs.read(root, run_id)
    ctx = RunContext(root, run_id, record, tokenizer)
    try:
        sections = build(ctx, list(PARTS.values()) if parts is None else parts)
    finally:
        ctx.close()
    page = render(f"forgeplay run {run_id}", sections, _intro(record))
    return write_text(Path(out) if out else loop_runs.run_dir(root, run_id) / REPORT, page)

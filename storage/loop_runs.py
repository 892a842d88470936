"""Whole-loop run records: `<root>/runs/<run_id>/run.json`, one per `forgeplay run`, with the
files made from it beside it (`report.html`). A record says what the run was asked to do (its
resolved config), which stages are done with their counts, seconds and summaries, the
datasets and models it made, its training runs and the held-out evaluations; `LoopRecord`
rewrites it atomically after every stage. A stage marked done is never run again: `forgeplay
run --resume RUN_ID` continues at the first stage not done (the stages themselves resume
inside, from their committed shards, ledgers and checkpoints). Here too: where records live,
which exist, reading one (`forgeplay report RUN_ID`).

    rec = LoopRecord.open(root, "run-3f2a", config)
    if not rec.done("sft"):
        rec.finish("sft", summary, seconds=12.0, rows_in=64, rows_out=30, notes="...")
    read(root, "run-3f2a")        # the record; FileNotFoundError naming the runs there are
    run_ids(root)                 # ["run-3f2a", ...]
    for run_id, record in records(root): ...
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Iterator

from storage import manifest
from storage.files import write_json

RUNS = "runs"
RECORD = "run.json"


def runs_root(root) -> Path:
    """The folder of every loop run under a data root."""
    return manifest.resolve_root(root) / RUNS


def run_dir(root, run_id: str) -> Path:
    """One loop run's folder (ValueError for a run id that is not a plain name)."""
    return runs_root(root) / manifest.check_name("run id", run_id)


def run_ids(root) -> list[str]:
    """The loop runs that have a record, sorted."""
    folder = runs_root(root)
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if (p / RECORD).is_file())


def read(root, run_id: str) -> dict:
    """A loop run's record. FileNotFoundError naming the runs that exist when there is none;
    ValueError when the file is not a JSON object."""
    path = run_dir(root, run_id) / RECORD
    if not path.is_file():
        known = ", ".join(run_ids(root)) or "none"
        raise FileNotFoundError(f"no run {run_id!r} in {runs_root(root)} (runs there: {known})")
    try:
        record = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path}: not a JSON object")
    return record


def records(root) -> Iterator[tuple[str, dict]]:
    """(run id, record) of every loop run whose record reads as a JSON object."""
    for run_id in run_ids(root):
        try:
            yield run_id, read(root, run_id)
        except ValueError:
            continue


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class LoopRecord:
    """run.json of one loop run (module docstring), kept in memory and saved on every change."""

    def __init__(self, path: Path, data: dict) -> None:
        self.path, self.data = path, data

    @classmethod
    def open(cls, root, run_id: str, config: dict) -> "LoopRecord":
        """The run's record, created when new; an existing one must have the same config."""
        path = run_dir(root, run_id) / RECORD
        if path.exists():
            data = json.loads(path.read_text())
            if data["config"] != config:
                raise ValueError(f"run {run_id} exists with another config ({path})")
            data.update(status="running", finished_at=None)
        else:
            data = {"run_id": run_id, "config": config, "started_at": _now(), "finished_at": None,
                    "status": "running", "datasets": {}, "stages": {}, "models": {}, "train_runs": {}, "eval": {}}
        rec = cls(path, data)
        rec.save()
        return rec

    @property
    def folder(self) -> Path:
        return self.path.parent

    def save(self) -> None:
        write_json(self.path, self.data)

    def done(self, stage: str) -> bool:
        return self.data["stages"].get(stage, {}).get("status") == "done"

    def finish(self, stage: str, summary: dict, seconds: float, rows_in: int | None = None,
               rows_out: int | None = None, notes: str = "") -> None:
        """Mark `stage` done with its counts and the stage flow's summary; saved at once."""
        self.data["stages"][stage] = {"status": "done", "seconds": round(seconds, 2), "rows_in": rows_in,
                                      "rows_out": rows_out, "notes": notes, "summary": summary, "at": _now()}
        self.save()

    def fail(self, stage: str, error: str) -> None:
        self.data["stages"][stage] = {"status": "failed", "error": error, "at": _now()}
        self.data["status"] = "failed"
        self.save()

    def close(self) -> None:
        self.data.update(status="done", finished_at=_now())
        self.save()

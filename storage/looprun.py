"""The record of a whole-loop run (`forgeplay run`): `<root>/runs/<run_id>/run.json`, rewritten
atomically after every stage, says what the run was asked to do (its resolved config), which
stages are done with their counts, seconds and summaries, the datasets and models it made and
the held-out evaluations. A stage marked done is never run again: `forgeplay run --resume
RUN_ID` continues at the first stage not done (the stages themselves resume inside, from
their committed shards, ledgers and checkpoints). storage/loop_runs.py finds and reads
records (`forgeplay report RUN_ID`).

    rec = LoopRecord.open(root, "run-3f2a", config)
    if not rec.done("sft"):
        summary = ...
        rec.finish("sft", summary, seconds=12.0, rows_in=64, rows_out=30, notes="...")
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from storage.files import write_json
from storage.loop_runs import RECORD, run_dir


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

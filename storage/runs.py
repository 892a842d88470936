"""Run records beside the data: `<root>/<dataset>/_runs/<run_id>.json` holds what a run was
asked to do (its resolved config) and what it did (counts, timing). A run id is derived
from a hash of the config, so rerunning the same config resumes the same run and writes
nothing twice. Other per-run files (the importer's `<run_id>.rejects.jsonl`) go in the
same folder. `Stages` times the stages of a run and counts their rows in and out (the
table of a flow's artifact and of a training summary).

    run_id = f"synth-{config_hash({'synth': asdict(cfg)})}"
    save_run_config(root, "demo", run_id, {"synth": asdict(cfg)}, extra={"summary": {...}})
    read_run(root, "demo", run_id)["config"]

    stages = Stages()
    with stages.stage("load") as st:
        rows = load(...)
        st.rows_out = len(rows)
    stages.as_dicts()    # [{"stage": "load", "rows_out": 500, "seconds": 0.8, "notes": ""}]
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from storage import manifest
from storage.files import write_json

IGNORED = ("run_id", "data_root", "progress")  # settings that do not change what a run makes


def as_dict(config: Any) -> dict:
    """A config (dataclass or mapping) as plain JSON types (unknown values as text)."""
    if dataclasses.is_dataclass(config):
        config = dataclasses.asdict(config)
    return json.loads(json.dumps(config, default=str))


def config_hash(config: Any, ignore: tuple[str, ...] = IGNORED, length: int = 12) -> str:
    """Short stable hash of a config's JSON form, top-level keys in `ignore` left out."""
    d = {k: v for k, v in as_dict(config).items() if k not in ignore}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:length]


def without_later_defaults(fields: dict, later: dict) -> dict:
    """`fields` without the options added after runs existed (`later`: name -> the default
    they had) that are at that default, so hashing them keeps older runs' ids."""
    return {k: v for k, v in fields.items() if k not in later or later[k] != v}


def runs_dir(root, dataset: str) -> Path:
    return manifest.dataset_dir(manifest.resolve_root(root), dataset) / "_runs"


def save_run(root, dataset: str, run_id: str, record: dict) -> Path:
    """Write a run record (atomically); returns its path."""
    return write_json(runs_dir(root, dataset) / f"{run_id}.json", record)


def save_run_config(root, dataset: str, run_id: str, config: Any, extra: dict | None = None) -> Path:
    """A run record with the resolved config, its hash and the time, plus `extra`."""
    return save_run(root, dataset, run_id, {
        "run_id": run_id, "config": as_dict(config), "config_hash": config_hash(config),
        "saved_at": dt.datetime.now(dt.timezone.utc).isoformat(), **(extra or {})})


def read_run(root, dataset: str, run_id: str) -> dict:
    """A run record; FileNotFoundError naming the run when there is none."""
    path = runs_dir(root, dataset) / f"{run_id}.json"
    if not path.exists():
        raise FileNotFoundError(f"no run {run_id!r} in dataset {dataset!r} ({path})")
    return json.loads(path.read_text())


@dataclass
class Stage:
    """One stage of a run: its rows in and out, wall seconds and a note."""

    stage: str
    rows_in: int | None = None
    rows_out: int | None = None
    seconds: float = 0.0
    notes: str = ""

    def as_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if v is not None}


class Stages:
    """The stages of one run, in order (see the module docstring)."""

    def __init__(self) -> None:
        self.rows: list[Stage] = []

    @contextmanager
    def stage(self, name: str, rows_in: int | None = None, notes: str = "") -> Iterator[Stage]:
        """Time a block as a stage; the block may set rows_in, rows_out and notes."""
        st = Stage(name, rows_in, notes=notes)
        t = time.perf_counter()
        try:
            yield st
        finally:
            st.seconds += time.perf_counter() - t
            self.rows.append(st)

    def add(self, name: str, rows_in: int | None = None, rows_out: int | None = None, seconds: float = 0.0,
            notes: str = "") -> Stage:
        """A stage timed elsewhere (e.g. summed over chunks)."""
        self.rows.append(st := Stage(name, rows_in, rows_out, seconds, notes))
        return st

    def as_dicts(self) -> list[dict]:
        return [s.as_dict() for s in self.rows]

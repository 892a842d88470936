"""Reading whole-loop run records: `<root>/runs/<run_id>/run.json`, one per `forgeplay run` (its
config, stages, the datasets and models it made, its training runs and evals), with the
files made from it beside it (`report.html`). Here: where they live, which exist, reading one.

    read(root, "run-3f2a")        # the record; FileNotFoundError naming the runs there are
    run_ids(root)                 # ["run-3f2a", ...]
    for run_id, record in records(root): ...
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from storage import manifest

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

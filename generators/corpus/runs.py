"""Run records beside the data: `<root>/<dataset>/_runs/<run_id>.json` holds a run's
resolved config and counts; the importer also writes `<run_id>.rejects.jsonl` there."""

from __future__ import annotations

import json
import os
from pathlib import Path

from storage import manifest


def runs_dir(root, dataset: str) -> Path:
    return manifest.dataset_dir(manifest.resolve_root(root), dataset) / "_runs"


def save_json(path: Path, data) -> None:
    """Write JSON atomically (temp file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)

"""Helpers every flow uses: config hashing, saving the resolved config beside a run's
output, and the end-of-flow artifact.

A flow's config is a dataclass whose fields carry `metadata={"help": ...}`; its hash names
the run, so rerunning the same config resumes the same run and duplicates nothing. (Prefect's
defaults for running with no server are set in flows/__init__.py, before prefect is imported.)
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from storage import manifest



def as_dict(config: Any) -> dict:
    if dataclasses.is_dataclass(config):
        return json.loads(json.dumps(dataclasses.asdict(config), default=str))
    return json.loads(json.dumps(config, default=str))


def config_hash(config: Any, ignore: tuple[str, ...] = ("run_id", "data_root", "progress")) -> str:
    d = {k: v for k, v in as_dict(config).items() if k not in ignore}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def save_run_config(root: Path, dataset: str, run_id: str, config: Any, extra: dict | None = None) -> Path:
    """Write the resolved config to `<root>/<dataset>/_runs/<run_id>.json` (atomically)."""
    ddir = manifest.dataset_dir(Path(root), dataset) / "_runs"
    ddir.mkdir(parents=True, exist_ok=True)
    path = ddir / f"{run_id}.json"
    body = {"run_id": run_id, "config": as_dict(config), "config_hash": config_hash(config),
            "saved_at": dt.datetime.now(dt.timezone.utc).isoformat(), **(extra or {})}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(body, indent=2, default=str))
    os.replace(tmp, path)
    return path


def stage_table(stages: list[dict]) -> str:
    """A markdown table of stages: name, rows in, rows out, seconds, notes."""
    lines = ["| stage | rows in | rows out | seconds | notes |", "|---|---:|---:|---:|---|"]
    for s in stages:
        lines.append(f"| {s['stage']} | {s.get('rows_in', '')} | {s.get('rows_out', '')} | "
                     f"{s.get('seconds', 0):.2f} | {s.get('notes', '')} |")
    return "\n".join(lines)


def publish_artifact(key: str, title: str, stages: list[dict], counts: dict[str, dict] | None = None) -> str:
    """End-of-flow Prefect artifact: rows in and out per stage, counts (e.g. reject reasons,
    case mix) and timing. Returns the markdown (also when no Prefect run is active)."""
    md = [f"# {title}", "", stage_table(stages)]
    for name, table in (counts or {}).items():
        md += ["", f"## {name}", "", "| value | count |", "|---|---:|"]
        md += [f"| {k} | {v} |" for k, v in sorted(table.items(), key=lambda kv: -kv[1])]
    text = "\n".join(md)
    try:
        from prefect.artifacts import create_markdown_artifact
        from prefect.context import FlowRunContext

        if FlowRunContext.get() is not None:
            create_markdown_artifact(markdown=text, key=key.lower().replace("_", "-"), description=title)
    except Exception:  # an artifact is a report; never fail a flow over it
        pass
    return text

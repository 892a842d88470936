"""`forgeplay pipeline`: world corpus, synthesis and validation in one flow (the data half of
`forgeplay run`), on the embedded default model unless a backend is named."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from storage.configcli import config_command
from flows.cli_synth import slot_table
from flows.configs import PipelineConfig
from generators.llm.registry import BackendConfig


def register(app: typer.Typer) -> None:
    @config_command(app, "pipeline", PipelineConfig, BackendConfig, errors=(ValueError, KeyError))
    def pipeline(cfg: PipelineConfig, backend: BackendConfig, data_root=None) -> None:
        """Run the main job as one Prefect flow: build the fictional world corpus, synthesize
        tool-use trajectories with the model, validate them, and print what each stage
        produced. Reruns resume and duplicate nothing."""
        from flows.pipeline import run

        out = run(cfg, backend, data_root)
        console = Console()
        t = Table(title=f"pipeline {cfg.dataset}")
        for c in ("stage", "rows in", "rows out", "seconds", "notes"):
            t.add_column(c)
        for s in out["stages"]:
            t.add_row(s["stage"], str(s.get("rows_in", "")), str(s.get("rows_out", "")),
                      f"{s.get('seconds', 0):.1f}", str(s.get("notes", "")))
        console.print(t)
        s = out["synthesize"]
        console.print(f"case mix: {s['case']}  route mix: {s['route']}")
        console.print(slot_table(s))
        v = out["validate"]
        console.print(f"validation funnel ({v['rows_in']} in, {v['rows_out']} accepted into {v['accepted_dataset']}):")
        for f in v["funnel"]:
            if f["reason"]:
                console.print(f"  {f['layer']:<8} {f['reason']:<32} {f['rejected']}")
        console.print(f"rows per kind in {cfg.dataset}: {out['rows']}")
        console.print(f"look inside: forgeplay inspect {cfg.dataset}   |   "
                      f"forgeplay sql \"SELECT route, \\\"case\\\", count(*) FROM {cfg.dataset}_trajectories GROUP BY ALL\"")

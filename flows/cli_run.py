"""`forgeplay run`: the whole loop (flows/run.py) from the command line, what `make run` calls.
Without `--config` it runs the loop's defaults on the embedded model; a config file sets any
stage's options (flows/loop_config.py) and is checked whole before anything runs; `--resume
RUN_ID` continues a run from its record. It ends with the stage table and any stage's warnings,
where the data, models and report are, the validation funnel, held-out exact match after each
stage, and DuckDB queries to try."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from storage.configcli import DataRoot, fail


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_cmd(config: Annotated[Optional[Path], typer.Option(
                    "--config", help="YAML or JSON file of the loop's options: top-level dataset, model and skip, and "
                                     "a section per stage (corpus, synthesize, validate, eval, sft, selfplay, acquire, "
                                     "grpo, backend) with that stage's command options without dashes.")] = None,
                resume: Annotated[Optional[str], typer.Option(
                    "--resume", help="continue this run (its id, e.g. run-3f2a9c0d1e2b) with the config it was "
                                     "started with: stages done are skipped, the others resume inside.")] = None,
                dataset: Annotated[Optional[str], typer.Option(help="the world dataset (overrides the file's)")] = None,
                print_config_schema: Annotated[bool, typer.Option(
                    "--print-config-schema", help="print the JSON Schema of a --config file (every option, its type "
                                                  "and default; docs/loop-config.md is made from it) and exit")] = False,
                data_root: DataRoot = None) -> None:
        """Run the whole loop as one Prefect flow: corpus, synthesis, validation, SFT, self-play
        tasks and attempts, label acquisition, label-aware GRPO, with held-out evaluations
        between; then dataset cards and an HTML report. A rerun (or --resume) continues a
        killed run without redoing committed work."""
        if print_config_schema:
            import json

            from flows.config_reference import schema

            typer.echo(json.dumps(schema(), indent=2, default=str))
            return
        from flows import loop_config
        from storage import configfile, loop_runs, resolve_root

        if resume and (config or dataset):
            fail("--resume continues a run with the config it started with; give no --config or --dataset")
        try:
            if resume:
                cfg = loop_runs.read(data_root, resume)["config"]
            else:
                cfg = loop_config.load(config, dataset=dataset)
        except (configfile.ConfigFileError, FileNotFoundError, ValueError) as e:
            fail(str(e))
        from flows.run import StageFailed, run

        try:
            record = run(cfg, data_root, run_id=resume)
        except StageFailed as e:
            Console(stderr=True).print(f"[red]run failed:[/red] {e}", soft_wrap=True)
            raise typer.Exit(1) from None
        except ValueError as e:  # what the config names (loop_config.check_names), before any stage
            fail(str(e))
        show(record, resolve_root(data_root))


def show(record: dict, root: Path) -> None:
    """What the run made: stages, where things are, the funnel, evaluations, queries to try."""
    c = Console()
    t = Table(title=f"run {record['run_id']}")
    for col in ("stage", "rows in", "rows out", "seconds", "notes"):
        t.add_column(col)
    for name, s in record["stages"].items():
        t.add_row(name, _n(s.get("rows_in")), _n(s.get("rows_out")), f"{s.get('seconds', 0):.0f}", s.get("notes", ""))
    c.print(t)
    for name, s in record["stages"].items():  # whole, where the table's notes column wraps them
        for w in (s.get("summary") or {}).get("warnings") or []:
            c.print(f"[yellow]warning[/yellow] ({name}): {w}", soft_wrap=True)
    ds = record["datasets"]
    c.print(f"[bold]data[/bold] in {root.absolute()}: " + ", ".join(f"{k} -> {v}" for k, v in ds.items()))
    c.print("[bold]models[/bold] " + ", ".join(f"{k}: {v}" for k, v in record["models"].items() if k != "policy"))
    v = record["stages"].get("validate", {}).get("summary")
    if v:
        c.print(f"[bold]validation funnel[/bold]: {v['rows_in']} in, {v['rows_out']} accepted")
        for f in v["funnel"]:
            if f["reason"]:
                c.print(f"  {f['layer']:<8} {f['reason']:<32} {f['rejected']}")
    if record["eval"]:
        e = Table(title="held-out exact match after each stage")
        for col in ("model", "exact match", "F1", "answered", "rollouts"):
            e.add_column(col)
        for k, s in record["eval"].items():
            e.add_row(k, f"{s['em']:.3f}", f"{s['f1']:.3f}", f"{s['answered']:.3f}", str(s["rollouts"]))
        c.print(e)
    shards = record.get("shards") or {}
    if shards.get("quarantined"):
        c.print("[red]quarantined shards[/red] (corrupt or missing; no stage read them, `forgeplay verify` rechecks):")
        for p in shards["quarantined"]:
            c.print(f"  {p['path']}  {p['dataset']}/{p['kind']}: {p['problem']}")
    elif shards:
        c.print(f"[bold]shards[/bold]: all {shards['checked']} committed shards match their checksums")
    if record.get("report"):
        c.print(f"[bold]report[/bold] {record['report']}")
    c.print("[bold]try[/bold]:")
    for q in queries(ds):
        c.print(f"  {q}")


def queries(ds: dict) -> list[str]:
    """Three DuckDB queries over views the run made (a skipped stage made none)."""
    w = ds.get("world", "demo")
    out = [f'forgeplay sql "SELECT route, \\"case\\", count(*) FROM {w}_trajectories GROUP BY ALL"']
    if "selfplay" in ds:
        out.append(f'forgeplay sql "SELECT passed, reason, count(*) FROM {ds["selfplay"]}_verdicts GROUP BY ALL"')
    if "labels" in ds:
        out.append(f'forgeplay sql "SELECT source, strategy, count(*) FROM {ds["labels"]}_labels GROUP BY ALL"')
    out.append(f'forgeplay sql "SELECT layer, reason, count(*) FROM {w}_verdicts WHERE NOT passed GROUP BY ALL"')
    return out[:3]


def _n(v) -> str:
    return "" if v is None else str(v)

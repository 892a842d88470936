"""`forgeplay validate`: multi-layer validation (schema, rules, judge, answerability, dedup)
as a Prefect flow. Options come from ValidateConfig and BackendConfig (the judge model);
`--list-checks` prints the registered checks (validators/registry.py) instead.

    forgeplay validate --dataset demo --workers 2
    forgeplay validate --dataset demo --task-runner dask --workers 2
    forgeplay validate --input theirs.jsonl --out-dataset theirs --corpus demo --strict
    forgeplay validate --list-checks
"""

from __future__ import annotations

from dataclasses import dataclass, field

import typer
from rich.console import Console
from rich.table import Table

from flows.runners import RunnerConfig
from storage.configcli import config_command
from generators.llm.base import BackendError
from generators.tools.retriever import RetrieverError
from generators.llm.registry import BackendConfig
from validators.reasons import describe
from validators.registry import listing
from validators.validator import ValidateConfig


@dataclass
class CommandOptions:
    """Options of the command that are no part of a run's config (nor of its run id)."""

    list_checks: bool = field(default=False, metadata={
        "help": "Print every check: its layer, the record kinds it applies to and its reason codes; then exit."})


def checks_table() -> Table:
    t = Table(title="validation checks, in layer order (validators/registry.py; codes: python -m validators.reasons)")
    for c in ("check", "layer", "kinds", "runs", "reason codes"):
        t.add_column(c)
    for row in listing():
        t.add_row(row["check"], row["layer"], row["kinds"], row["runs"], ", ".join(row["reasons"]))
    return t


def funnel_table(summary: dict) -> Table:
    t = Table(title=f"validate {summary['run_id']}: {summary['rows_in']} in, {summary['rows_out']} accepted "
                    f"-> {summary['accepted_dataset']}/{summary['kind']}")
    for c in ("layer", "check", "reason", "rejected", "rows in", "rows out"):
        t.add_column(c, justify="right" if c in ("rejected", "rows in", "rows out") else "left")
    for f in summary["funnel"]:
        t.add_row(f["layer"], f["check"] or "", f["reason"] or "-", str(f["rejected"]), str(f["rows_in"]), str(f["rows_out"]))
    return t


def register(app: typer.Typer) -> None:
    @config_command(app, "validate", ValidateConfig, BackendConfig, RunnerConfig, CommandOptions,
                    errors=(ValueError, KeyError, BackendError, RetrieverError))
    def validate(cfg: ValidateConfig, backend: BackendConfig, runner: RunnerConfig, opts: CommandOptions,
                 data_root=None) -> None:
        """Validate trajectories, tasks or triples (a Prefect flow): schema, rules, LLM judge,
        answerability and dedup layers; writes `verdicts` (every check, with a reason code)
        and the accepted records to <dataset>_valid (or --out-dataset), and prints the funnel.
        `--workers N` runs the schema and rule layers in N processes (`--task-runner dask|ray`:
        on a Dask or Ray cluster, local unless `--address`); `--list-checks` lists
        the checks. `forgeplay sql "SELECT * FROM <dataset>_verdicts"` shows each verdict."""
        if opts.list_checks:
            Console(width=max(Console().width, 150)).print(checks_table())
            return
        from flows.validate import run

        cfg.layer_list()  # a bad --layers fails before any work
        summary = run(cfg, backend, data_root, runner=runner)
        console = Console()
        console.print(funnel_table(summary))
        for s in summary["skipped_checks"]:
            console.print(f"[yellow]{s['records']} record(s) passed {s['layer']}/{s['check']} without it running "
                          f"({s['reason']}: {describe(s['reason'])})[/]; --strict rejects them"
                          + ("; --corpus DATASET gives replay its documents" if s["check"] == "replay" else ""))
        console.print(f"{summary['seconds']:.1f}s, {summary['records_per_s']:.0f} records/s with "
                      f"{summary['workers']} worker(s) ({runner.task_runner} task runner); "
                      f"{summary['skipped_committed']} already validated in this run")

"""`forgeplay acquire-labels` (the acquisition flow, flows/acquire.py; options from
AcquireConfig) and `forgeplay labels report` (spend, budget left, and per strategy how often a
bought label corrected the vote)."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from acquire.session import AcquireConfig
from storage.configcli import USER_ERRORS, DataRoot, config_command


def register(app: typer.Typer) -> None:
    @config_command(app, "acquire-labels", AcquireConfig, errors=USER_ERRORS)
    def acquire_labels(cfg: AcquireConfig, data_root=None) -> None:
        """Active label acquisition (a Prefect flow): sample --n answers per prompt from the
        policy, take the majority vote as pseudo-label, score the prompts with --strategy and
        buy true labels for the top --p of each batch from --source without spending past
        --budget (a persisted ledger: a rerun or a concurrent run never pays twice). Writes
        rollouts and labels (bought and pseudo) to --out."""
        from flows.acquire import run_acquire

        s = run_acquire(cfg, data_root)
        t = Table("batch", "prompts", "chosen", "bought", "already paid", "over budget",
                  title=f"{s['run_id']} -> {s['dataset']} ({s['skipped_batches']} batches already done)")
        for b in s["batches"]:
            t.add_row(*(str(b[k]) for k in ("step", "prompts", "chosen", "bought", "already_paid", "over_budget")))
        console = Console()
        console.print(t)
        console.print(_ledger_line(s["ledger"]))

    labels = typer.Typer(help="Inspect acquired labels.", no_args_is_help=True)
    app.add_typer(labels, name="labels")

    @labels.command("report")
    def report(dataset: str = typer.Option(..., help="labels dataset (acquire-labels --out)"),
               data_root: DataRoot = None) -> None:
        """Spend and budget left, and per strategy the labels bought and how often one
        corrected the majority vote."""
        from acquire.report import label_report
        from storage import resolve_root

        try:
            r = label_report(resolve_root(data_root), dataset)
        except FileNotFoundError as e:
            Console(stderr=True).print(f"[red]labels report failed:[/red] {e}")
            raise typer.Exit(2) from None
        t = Table("strategy", "bought", "cost", "corrected the vote", "share", title=f"labels of {dataset}")
        for name, s in r["strategies"].items():
            t.add_row(name, str(s["bought"]), f"{s['cost']:g}", str(s["corrected"]), f"{s['share']:.3f}")
        console = Console()
        console.print(t)
        console.print(_ledger_line(r["ledger"]))


def _ledger_line(ledger: dict) -> str:
    return (f"budget {ledger['budget']:g}: spent {ledger['spent']:g} on {ledger['labels']} labels, "
            f"{ledger['left']:g} left")

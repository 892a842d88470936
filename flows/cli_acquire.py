"""`forgeplay acquire-labels` (the acquisition flow, flows/acquire.py; options from
AcquireConfig), `forgeplay labels ingest` (buy the labels people wrote into queue files,
acquire/ingest.py) and `forgeplay labels report` (spend, budget left, and per strategy and
per source how often a bought label corrected the vote)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from acquire.session import AcquireConfig
from storage.configcli import USER_ERRORS, DataRoot, config_command

_COLUMNS = {"column": (), "queue": ("queued",), "llm": ("unlabelled",)}  # per source, besides bought


def register(app: typer.Typer) -> None:
    @config_command(app, "acquire-labels", AcquireConfig, errors=USER_ERRORS)
    def acquire_labels(cfg: AcquireConfig, data_root=None) -> None:
        """Active label acquisition (a Prefect flow): sample --n answers per prompt from the
        policy, take the majority vote as pseudo-label, score the prompts with --strategy and
        buy true labels for the top --label-p of each batch from --source without spending past
        --budget (a persisted ledger: a rerun or a concurrent run never pays twice). Writes
        rollouts and labels (bought and pseudo) to --out-dataset. --source queue writes the chosen
        prompts to a file for people to fill in (then forgeplay labels ingest); --source llm
        asks an annotator model (--annotator-*)."""
        from flows.acquire import run_acquire

        s = run_acquire(cfg, data_root)
        keys = ("step", "prompts", "chosen", "bought", *_COLUMNS.get(cfg.source, ()), "already_paid", "over_budget")
        t = Table(*(k.replace("_", " ").replace("step", "batch").replace("unlabelled", "no answer") for k in keys),
                  title=f"{s['run_id']} -> {s['dataset']} ({s['skipped_batches']} batches already done)")
        for b in s["batches"]:
            t.add_row(*(str(b[k]) for k in keys))
        console = Console()
        console.print(t)
        for f in s["source"].get("files", []):
            console.print(f"queued for labelling: {f}", soft_wrap=True)
        console.print(_ledger_line(s["ledger"]), soft_wrap=True)

    labels = typer.Typer(help="Ingest and inspect acquired labels.", no_args_is_help=True)
    app.add_typer(labels, name="labels")

    @labels.command("ingest")
    def ingest(dataset: str = typer.Option(..., help="labels dataset (acquire-labels --out-dataset)"),
               file: list[Path] = typer.Option(..., "--file",
                                               help="a filled-in queue file, .csv or .parquet (repeatable)"),
               data_root: DataRoot = None) -> None:
        """Buy the labels people wrote into queue files (acquire-labels --source queue). Every
        file is checked first: a malformed one is an error naming its lines, and nothing is
        written or spent. Prompts paid before cost nothing again; rows past the budget are
        listed, not ingested."""
        from rich.markup import escape

        from acquire.ingest import ingest as run_ingest
        from storage import resolve_root

        try:
            r = run_ingest(resolve_root(data_root), dataset, file)
        except USER_ERRORS as e:
            Console(stderr=True).print(f"[red]labels ingest failed:[/red] {escape(str(e))}", soft_wrap=True)
            raise typer.Exit(2) from None
        console = Console()
        console.print(f"{r['rows']} labels read: {r['bought']} bought, {r['already_paid']} already paid "
                      f"({r['changed']} of them with another label, kept), {r['busy']} busy, "
                      f"{r['over_budget']} over the budget", soft_wrap=True)
        if r["not_ingested"]:
            shown = ", ".join(r["not_ingested"][:10]) + (" ..." if len(r["not_ingested"]) > 10 else "")
            console.print(f"not ingested ({len(r['not_ingested'])}): {shown}", soft_wrap=True)
        console.print(_ledger_line(r["ledger"]), soft_wrap=True)

    @labels.command("report")
    def report(dataset: str = typer.Option(..., help="labels dataset (acquire-labels --out-dataset)"),
               data_root: DataRoot = None) -> None:
        """Spend and budget left, and per strategy and per source the labels bought and how
        often one corrected the majority vote."""
        from acquire.report import label_report
        from storage import resolve_root

        try:
            r = label_report(resolve_root(data_root), dataset)
        except FileNotFoundError as e:
            Console(stderr=True).print(f"[red]labels report failed:[/red] {e}")
            raise typer.Exit(2) from None
        console = Console()
        for by, head in (("strategies", "strategy"), ("sources", "source")):
            t = Table(head, "bought", "cost", "corrected the vote", "share", title=f"labels of {dataset} by {head}")
            for name, s in r[by].items():
                t.add_row(name, str(s["bought"]), f"{s['cost']:g}", str(s["corrected"]), f"{s['share']:.3f}")
            console.print(t)
        console.print(_ledger_line(r["ledger"]))


def _ledger_line(ledger: dict) -> str:
    queued = f"; {ledger['queued']} queued for labelling hold {ledger['held']:g}" if ledger.get("queued") else ""
    return (f"budget {ledger['budget']:g}: spent {ledger['spent']:g} on {ledger['labels']} labels, "
            f"{ledger['left']:g} left{queued}")

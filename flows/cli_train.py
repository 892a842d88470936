"""`forgeplay train KIND`: the training flow (flows/train.py) from the command line, one
command per stage kind registered in train/stages.py (sft, grpo, selfplay-examiner,
selfplay-student), with options from the
kind's config and TrainConfig; and `forgeplay train eval`. `--nproc N` trains data-parallel
in N processes (torchrun on this machine; train/dist.py)."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

import selfplay.update  # noqa: F401  (registers the self-play update stages; flows/train.py the labellers)
from generators.tools.passages import RetrieverError
from storage.configcli import USER_ERRORS, config_command
from train.evaluate import EvalConfig
from train.stages import add_stage_commands


def _report(summary: dict) -> None:
    c = Console()
    first, last = summary.get("first") or {}, summary.get("last") or {}
    c.print(f"[bold]{summary['steps']} steps[/bold] in {summary['run_dir']}; "
            f"loss {first.get('loss', float('nan')):.4f} -> {last.get('loss', float('nan')):.4f}"
            + (f", reward {first['reward']:.3f} -> {last['reward']:.3f}" if "reward" in last else ""))
    c.print(f"model: {summary['final_model']}  curves: {summary['curves']}  data: {summary['counts']}")


def _train(kind: str, cfg, train, data_root) -> None:
    """Run the training flow; a failed training process is reported in one line, exit 1."""
    from flows.train import run

    try:
        summary = run(kind, cfg, train, data_root)
    except Exception as e:
        dist = sys.modules.get("train.dist")  # a launch imported it (and torch); else this is no LaunchFailed
        if dist is None or not isinstance(e, dist.LaunchFailed):
            raise
        Console(stderr=True).print(f"[red]train {kind} failed:[/red] {e}")
        raise typer.Exit(1) from None
    _report(summary)


def register(app: typer.Typer) -> None:
    train_app = typer.Typer(help="Train models: supervised fine-tuning and GRPO (Prefect flows), and evaluate tool use.",
                            no_args_is_help=True)
    app.add_typer(train_app, name="train")
    add_stage_commands(train_app, _train)

    @config_command(train_app, "eval", EvalConfig, errors=USER_ERRORS + (RetrieverError,), label="train eval")
    def evaluate(cfg: EvalConfig, data_root=None) -> None:
        """Evaluate a model's tool use: greedy multi-turn rollouts on a dataset's held-out
        triples through the BM25 simulator; prints the rates of well-formed tool calls,
        answers and exact match (run it before and after training to compare)."""
        from rich.table import Table

        from train.evaluate import run_eval

        s = run_eval(cfg, data_root, warn=lambda w: Console(stderr=True).print(f"[yellow]warning:[/yellow] {w}"))
        table = Table(title=f"tool-use eval of {s['model']} on {cfg.data} ({s['rollouts']} triples)")
        for col in ("metric", "value"):
            table.add_column(col)
        for k in ("called", "well_formed", "answered", "em", "tool_em", "f1", "calls_per_rollout", "found_per_call"):
            table.add_row(k, f"{s[k]:.3f}")
        Console().print(table)
        kinds = Table(title="by question type / hops")
        cols = ("rollouts", "well_formed", "answered", "em", "f1")
        for col in ("type", *cols):
            kinds.add_column(col)
        for kind, row in s["by_qtype"].items():
            kinds.add_row(kind, str(row["rollouts"]), *(f"{row[c]:.3f}" for c in cols[1:]))
        Console().print(kinds)

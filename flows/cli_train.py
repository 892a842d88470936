"""`forgeplay train sft|grpo`: the training flows from the command line (flows/train.py).
Options come from the config dataclasses (SFTConfig or GRPOConfig, and TrainConfig).
`--nproc N` trains data-parallel in N processes (torchrun on this machine; train/dist.py)."""

from __future__ import annotations

import typer
from rich.console import Console

from storage.configcli import USER_ERRORS, config_command
from train.configs import GRPOConfig, SFTConfig, TrainConfig
from train.evaluate import EvalConfig



def _report(summary: dict) -> None:
    c = Console()
    first, last = summary.get("first") or {}, summary.get("last") or {}
    c.print(f"[bold]{summary['steps']} steps[/bold] in {summary['run_dir']}; "
            f"loss {first.get('loss', float('nan')):.4f} -> {last.get('loss', float('nan')):.4f}"
            + (f", reward {first['reward']:.3f} -> {last['reward']:.3f}" if "reward" in last else ""))
    c.print(f"model: {summary['final_model']}  curves: {summary['curves']}  data: {summary['counts']}")


def _run(label: str, fn, *args) -> dict:
    """Call a training flow; a failed training process is reported in one line, exit 1."""
    from train.dist import LaunchFailed

    try:
        return fn(*args)
    except LaunchFailed as e:
        Console(stderr=True).print(f"[red]{label} failed:[/red] {e}")
        raise typer.Exit(1) from None


def register(app: typer.Typer) -> None:
    train_app = typer.Typer(help="Train models: supervised fine-tuning and GRPO (Prefect flows), and evaluate tool use.",
                            no_args_is_help=True)
    app.add_typer(train_app, name="train")

    @config_command(train_app, "sft", SFTConfig, TrainConfig, errors=USER_ERRORS, label="train sft")
    def sft(sft: SFTConfig, train: TrainConfig, data_root=None) -> None:
        """Fine-tune a model on a dataset's validated trajectories (loss on assistant tokens
        only, rendered with the model's chat template). Writes checkpoints, metrics.jsonl,
        curves.png and the trained model (OUT/final); --resume continues after a kill;
        --nproc N trains data-parallel in N processes (one per GPU, or gloo on CPU)."""
        from flows.train import run_sft

        _report(_run("train sft", run_sft, sft, train, data_root))

    @config_command(train_app, "grpo", GRPOConfig, TrainConfig, errors=USER_ERRORS, label="train grpo")
    def grpo(grpo: GRPOConfig, train: TrainConfig, data_root=None) -> None:
        """GRPO on a dataset's triples: multi-turn rollouts in which the policy calls the
        virtual search tools (BM25 simulator), rewarded by exact match / F1 of the final
        <answer> plus a format reward. Writes checkpoints, metrics.jsonl, curves.png and
        OUT/final; --resume continues after a kill; --nproc N trains data-parallel, each
        process rolling out its own prompts."""
        from flows.train import run_grpo

        _report(_run("train grpo", run_grpo, grpo, train, data_root))

    @config_command(train_app, "eval", EvalConfig, errors=USER_ERRORS, label="train eval")
    def evaluate(cfg: EvalConfig, data_root=None) -> None:
        """Evaluate a model's tool use: greedy multi-turn rollouts on a dataset's held-out
        triples through the BM25 simulator; prints the rates of well-formed tool calls,
        answers and exact match (run it before and after training to compare)."""
        from rich.table import Table

        from train.evaluate import run_eval

        s = run_eval(cfg, data_root)
        table = Table(title=f"tool-use eval of {s['model']} on {cfg.data} ({s['rollouts']} triples)")
        for col in ("metric", "value"):
            table.add_column(col)
        for k in ("called", "well_formed", "answered", "em", "tool_em", "f1", "calls_per_rollout"):
            table.add_row(k, f"{s[k]:.3f}")
        Console().print(table)
        kinds = Table(title="by question type / hops")
        cols = ("rollouts", "well_formed", "answered", "em", "f1")
        for col in ("type", *cols):
            kinds.add_column(col)
        for kind, row in s["by_qtype"].items():
            kinds.add_row(kind, str(row["rollouts"]), *(f"{row[c]:.3f}" for c in cols[1:]))
        Console().print(kinds)

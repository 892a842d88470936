"""`forgeplay train KIND`: the training flow (flows/train.py) from the command line, one
command per stage kind registered in train/stages.py (sft, grpo, selfplay-examiner,
selfplay-student), with options from the
kind's config and TrainConfig; and `forgeplay train eval`. `--nproc N` trains data-parallel
in N processes (torchrun on this machine; train/dist.py), `--shard full|grad_op` sharded
with FSDP (train/shard.py); `forgeplay train plan` prints the model's memory per process
under each `--shard` setting (train/memory.py) and `forgeplay train consolidate` writes a
sharded checkpoint as a plain model folder (train/checkpoint.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

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


def _verl(cfg, train, data_root) -> None:
    """`train grpo --engine verl [--dry-run]`: write the verl run (train/verl_launch.py), print its
    command, and without --dry-run run it; a failed verl run is reported in one line, exit 1."""
    from acquire.training import bought_labels
    from storage import resolve_root
    from train import verl_launch
    from train.verl_export import Labels

    root = resolve_root(data_root)
    verl_launch.check(cfg, train, root)
    labels = Labels(bought_labels(root, cfg) if cfg.labels else {}, vote_weight=0.0, format_weight=cfg.format_weight,
                    reward=cfg.label_reward)
    plan = verl_launch.prepare(cfg, train, root, labels)
    c = Console()
    c.print(f"verl run written to {plan.folder}: {', '.join(f'{k} ({v} rows)' for k, v in plan.export.files.items())}, "
            f"{verl_launch.estimator(cfg)} advantages, {len(labels.bought)} bought labels; overrides.txt, run.sh")
    print(plan.shell())  # plain: a line to copy
    if cfg.dry_run:
        return
    code = verl_launch.launch(plan)
    if code:
        Console(stderr=True).print(f"[red]train grpo --engine verl failed:[/red] verl exited with {code}")
        raise typer.Exit(1)


def _train(kind: str, cfg, train, data_root) -> None:
    """Run the training flow; a failed training process is reported in one line, exit 1."""
    from flows.train import run

    if getattr(cfg, "engine", "trainer") != "trainer" or getattr(cfg, "dry_run", False):
        return _verl(cfg, train, data_root)

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

    @train_app.command("plan")
    def plan(model_size: Annotated[float, typer.Option(help="parameters of the model (7e9 for a 7B model)")],
             nproc: Annotated[int, typer.Option(help="processes (GPUs) the model is sharded over")] = 1,
             layers: Annotated[int, typer.Option(help="decoder blocks (a block holds model-size / layers)")] = 32,
             memory_gb: Annotated[float, typer.Option(help="GB each process may use: says which settings "
                                                           "fit (0 = no verdict)")] = 0.0) -> None:
        """Print the model's state per process (weights, gradients, AdamW state and what FSDP
        gathers; bf16 compute on GPUs) under each --shard setting, by the arithmetic of
        train/memory.py. Activations and the KV cache come on top: a training command prints
        its whole plan before its first step."""
        from rich.table import Table

        from train.memory import GB, state_table

        try:
            rows = state_table(model_size, nproc, layers)
        except ValueError as e:
            Console(stderr=True).print(f"[red]train plan:[/red] {e}", soft_wrap=True)
            raise typer.Exit(1) from None
        table = Table(title=f"model state per process: {model_size:.3g} parameters over {nproc} processes (GB)")
        cols = ("weights", "gradients", "optimizer", "gathered", "total")
        for col in ("--shard", *cols, *(["fits"] if memory_gb else [])):
            table.add_column(col, justify="right")
        for mode, parts in rows.items():
            fits = ["yes" if parts["total"] <= memory_gb * GB else "no"] if memory_gb else []
            table.add_row(mode, *(f"{parts.get(c, 0.0) / GB:.2f}" for c in cols), *fits)
        Console(width=120).print(table)

    @train_app.command("consolidate")
    def consolidate(run: Annotated[Path, typer.Argument(help="a run folder (its latest checkpoint) or a checkpoint "
                                                               "folder (RUN/checkpoints/step-N)")],
                    out: Annotated[Path, typer.Option("--out", "-o", help="model folder to write")],
                    model: Annotated[Optional[str], typer.Option(help="where the tokenizer comes from (default: "
                                                                      "the run's --model)")] = None) -> None:
        """Write a sharded checkpoint (--shard full|grad_op) as a plain Hugging Face model folder
        (float32 weights, config, tokenizer) that every backend loads; in one process."""
        from train.consolidate import consolidate_run

        try:
            path = consolidate_run(run, out, model)
        except (ValueError, FileNotFoundError) as e:
            Console(stderr=True).print(f"[red]train consolidate:[/red] {e}", soft_wrap=True)
            raise typer.Exit(1) from None
        Console().print(f"model: {path}")

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

"""`forgeplay export verl|trl`: write training-ready Parquet for verl (train/verl_export.py) and
TRL (train/export.py).

    forgeplay export verl --dataset demo --out exports/verl
    forgeplay export verl --tool-agent --dataset demo_valid --out exports/verl   # + tool config, adapter, corpus
    forgeplay export trl --dataset demo --out exports/trl --kinds trajectories --test-fraction 0.1
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from storage.configcli import DataRoot, old_spelling
from storage.manifest import resolve_root
from storage.reader import require_rows

err = Console(stderr=True)
export_app = typer.Typer(no_args_is_help=True, help="Export a dataset as Parquet that verl or TRL trainers read as is.")

Data = Annotated[Optional[str], typer.Option("--dataset", "-d", help="Dataset to export. [required]")]
OldData = Annotated[Optional[str], typer.Option("--data", hidden=True, help="deprecated: use --dataset")]
Out = Annotated[Path, typer.Option("--out", "-o", help="Output folder (created; files are overwritten).")]
Kinds = Annotated[Optional[list[str]], typer.Option(
    "--kinds", "-k", help="Source kinds (repeat the option): triples, tasks, trajectories. Default: all present.")]
TestFraction = Annotated[float, typer.Option(help="Share of rows in the test split (deterministic, by id hash).",
                                             min=0.0, max=1.0)]
KeepRejected = Annotated[bool, typer.Option("--keep-rejected/--skip-rejected",
                                            help="Keep records that failed a validation verdict.")]


def dataset_option(data: Optional[str], old: Optional[str]) -> str:
    """--dataset, or its old spelling --data (with a one-line deprecation note)."""
    data = old_spelling(data, old, "--dataset", "--data")
    if data is None:
        raise typer.BadParameter("--dataset is required")
    return data


def _run(fn: Callable, target: str, data: str, out: Path, kinds: Optional[list[str]], test_fraction: float,
         keep_rejected: bool, data_root: Optional[Path], **options) -> dict[str, int]:
    from train.export import EXPORT_KINDS

    chosen = tuple(kinds) if kinds else EXPORT_KINDS
    bad = [k for k in chosen if k not in EXPORT_KINDS]
    if bad:
        err.print(f"[red]unknown kind(s) {', '.join(bad)}[/red]; choose from {', '.join(EXPORT_KINDS)}")
        raise typer.Exit(2)
    try:  # what the options name, before a tokenizer loads
        require_rows(resolve_root(data_root), data, chosen, "--dataset")
        if options.get("corpus"):
            require_rows(resolve_root(data_root), options["corpus"], "documents", "--corpus")
        if options.get("tokenizer") is not None and not Path(options["tokenizer"]).exists():
            raise ValueError(f"--tokenizer: no such folder: {options['tokenizer']}")
    except ValueError as e:
        err.print(f"[red]export failed:[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(2)
    try:
        with err.status(f"exporting {data} for {target}"):
            result = fn(data, out, resolve_root(data_root), kinds=chosen, test_fraction=test_fraction,
                        skip_rejected=not keep_rejected, **options)
    except ValueError as e:
        err.print(f"[red]export failed:[/red] {e}")
        raise typer.Exit(2)
    counts = getattr(result, "files", result)
    if not any(counts.values()):
        err.print(f"[yellow]nothing exported: dataset {data!r} has no rows of kinds {', '.join(chosen)}[/yellow]")
    t = Table(title=f"{target} export of {data} -> {out}")
    t.add_column("file")
    t.add_column("rows", justify="right")
    for name, n in counts.items():
        t.add_row(name, str(n))
    Console().print(t)
    err.print(f"see {out / 'README.md'} for the {target} command")
    return result


@export_app.command("verl")
def verl(out: Out, data: Data = None, kinds: Kinds = None, test_fraction: TestFraction = 0.05,
         keep_rejected: KeepRejected = False, data_root: DataRoot = None, old_data: OldData = None,
         tool_agent: Annotated[bool, typer.Option(
             "--tool-agent", help="Export the tool-use prompts for verl's multi-turn tool agent: tool_config.yaml "
                                  "and the simulator-backed tool adapter (without it they are left out).")] = False,
         tokenizer: Annotated[Optional[Path], typer.Option(
             help="Model folder whose tokenizer and chat template count the prompts. Default: the embedded model.")] = None,
         corpus: Annotated[Optional[str], typer.Option(
             help="Dataset whose documents and tools the tools search. Default: the dataset the trajectories "
                  "came from.")] = None) -> None:
    """Write train.parquet / test.parquet with verl's columns (data_source, prompt, ability,
    reward_model, extra_info, agent_name), reward.py (standard library only), forgeplay's
    objectives as verl advantage estimators (forgeplay_labels: label-aware GRPO with CARE's
    weights; forgeplay_hrpo: hop-grouped; not CARE's probes, nor a distillation teacher with its
    own prompt, which verl has no hook for) and a README with the verl command; print the prompt
    lengths and the data.max_prompt_length to set."""
    from train.verl_export import export_verl

    r = _run(export_verl, "verl", dataset_option(data, old_data), out, kinds, test_fraction, keep_rejected, data_root,
             tool_agent=tool_agent, tokenizer=tokenizer, corpus=corpus)
    s = r.lengths
    if s:
        err.print(f"prompt lengths ({r.tokenizer}): median {s['median']}, p95 {s['p95']}, max {s['max']} tokens "
                  f"-> set data.max_prompt_length={s['max_prompt_length']}")
    else:
        err.print("[yellow]prompt lengths not measured (no tokenizer): pass --tokenizer PATH[/yellow]")
    if r.tools_in:
        err.print(f"{len(r.tool_names)} tools in tool_config.yaml, listed in the "
                  f"{'system prompt' if r.tools_in == 'system' else 'chat template'}; they search {r.corpus!r}")
    if r.left_out:
        err.print(f"[yellow]{r.left_out} tool-use prompts left out: add --tool-agent to export them[/yellow]")


@export_app.command("trl")
def trl(out: Out, data: Data = None, kinds: Kinds = None, test_fraction: TestFraction = 0.05,
        keep_rejected: KeepRejected = False, data_root: DataRoot = None, old_data: OldData = None) -> None:
    """Write grpo_{train,test}.parquet (prompt + answer columns for GRPOTrainer) and
    sft_{train,test}.parquet (messages for SFTTrainer) and a README with the TRL code;
    the reward is train/reward.py:answer_reward."""
    from train.export import export_trl

    _run(export_trl, "TRL", dataset_option(data, old_data), out, kinds, test_fraction, keep_rejected, data_root)


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")

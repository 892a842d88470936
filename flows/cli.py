"""The `forgeplay` command line: one Typer app; each area registers its commands here.

    forgeplay --help
    forgeplay --version
    forgeplay datasets
    forgeplay sql "SELECT count(*) FROM demo_trajectories"

A command's module (`flows/cli_*.py`, each with a `register(app)`) is imported when the
command runs, not before: `forgeplay sql` imports DuckDB and the storage layer, not the
models, torch or Prefect. `COMMANDS` names the module of each command, in the order
`--help` lists them (`--help` imports every module to show their own help lines; each
imports only the configs its options are built from). A new area is a module plus its
names here.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from typer.core import TyperGroup

from flows.engine import PREFECT_ENV

if TYPE_CHECKING:  # typer carries its own click; the real one is not imported to start faster
    import click

# command -> the module that registers it, in the order --help lists them
COMMANDS: dict[str, str] = {
    "datasets": "cli_data", "sql": "cli_data", "inspect": "cli_data", "show": "cli_show", "verify": "cli_data", "compact": "cli_compact",
    "generate": "cli_models", "synthesize": "cli_synth", "validate": "cli_validate", "pipeline": "cli_pipeline",
    "run": "cli_run", "acquire-labels": "cli_acquire", "serve": "cli_serve", "report": "cli_report",
    "card": "cli_report", "models": "cli_models", "corpus": "cli_corpus", "export": "cli_export",
    "train": "cli_train", "selfplay": "cli_selfplay", "labels": "cli_acquire", "tools": "cli_tools",
    "serve-retriever": "cli_retriever",
}


class LazyGroup(TyperGroup):
    """The root group: a command's module is imported the first time the command is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            if cmd_name in COMMANDS:
                self.load(COMMANDS[cmd_name])
            else:  # a typo: every command loaded, so the suggestion sees them all
                for module in dict.fromkeys(COMMANDS.values()):
                    self.load(module)
        return self.commands.get(cmd_name)

    def load(self, module: str) -> None:
        """Register the commands of flows/`module`.py on this group."""
        area = typer.Typer()
        importlib.import_module(f"flows.{module}").register(area)
        for name, cmd in typer.main.get_group(area).commands.items():
            self.commands.setdefault(name, cmd)


app = typer.Typer(cls=LazyGroup, no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False,
                  help="forgeplay: turn a corpus into verified RL training data, and train on it.")


def _print_version(value: bool) -> None:
    """`--version`: the installed package's version (pyproject.toml's), then exit."""
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"forgeplay {version('forgeplay')}")
        except PackageNotFoundError:  # run from a checkout that is not installed
            typer.echo("forgeplay (not installed)")
        raise typer.Exit()


@app.callback()
def _root(data_root: Optional[Path] = typer.Option(
              None, "--data-root", help="Root folder of all datasets, for every subcommand "
              "(default: $FORGEPLAY_DATA, else ./data)."),
          version: bool = typer.Option(
              False, "--version", is_eager=True, callback=_print_version, help="Print forgeplay's version and exit."),
          prefect: bool = typer.Option(
              False, "--prefect", help=f"Run flows as Prefect flow runs (recorded with their tasks, logs and "
              f"artifacts) even with no Prefect server configured: Prefect then starts a temporary local server "
              f"(also ${PREFECT_ENV}=1). Without it a flow is a Prefect flow run only when PREFECT_API_URL names a "
              f"server, it fans out (--workers N, --task-runner) or it is served; else it runs in this process.")
          ) -> None:
    if data_root is not None:
        os.environ["FORGEPLAY_DATA"] = str(data_root)
    if prefect:
        os.environ[PREFECT_ENV] = "1"


# A pass of Python's cyclic collector walks every container object that survived the passes
# before it: the documents, plans and caches a command holds. At the default thresholds (a
# young pass every 700 allocations net of frees) template synthesis of 10^4 trajectories on a
# 50,000-document corpus spent 3.1 of 27 s in them; at these, 0.5 s. Objects that refcounting
# frees are freed as before; only garbage in reference cycles waits longer.
GC_THRESHOLDS = (50_000, 20, 10)


def main() -> None:
    import gc

    from flows.interrupt import guarded

    gc.set_threshold(*GC_THRESHOLDS)
    guarded(app)


if __name__ == "__main__":
    main()

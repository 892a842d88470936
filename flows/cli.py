"""The `forgeplay` command line: one Typer app; each area registers its commands here.

    forgeplay --help
    forgeplay datasets
    forgeplay sql "SELECT count(*) FROM demo_trajectories"
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from flows import (cli_acquire, cli_compact, cli_corpus, cli_data, cli_export, cli_models, cli_pipeline, cli_report, cli_run,
                   cli_selfplay, cli_serve, cli_synth, cli_tools, cli_train, cli_validate)

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False,
                  help="forgeplay: turn a corpus into verified RL training data, and train on it.")


@app.callback()
def _root(data_root: Optional[Path] = typer.Option(
        None, "--data-root", help="Root folder of all datasets, for every subcommand "
        "(default: $FORGEPLAY_DATA, else ./data).")) -> None:
    if data_root is not None:
        os.environ["FORGEPLAY_DATA"] = str(data_root)


cli_data.register(app)
cli_compact.register(app)
cli_models.register(app)
cli_corpus.register(app)
cli_synth.register(app)
cli_validate.register(app)
cli_export.register(app)
cli_train.register(app)
cli_pipeline.register(app)
cli_run.register(app)
cli_selfplay.register(app)
cli_acquire.register(app)
cli_serve.register(app)
cli_tools.register(app)
cli_report.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()

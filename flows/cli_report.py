"""`forgeplay report RUN_ID`: a loop run's report as one self-contained HTML page
(reports/); `forgeplay card DATASET`: a dataset's Hugging Face card (storage/card.py).

    forgeplay report run-3f2a                 # data/runs/run-3f2a/report.html
    forgeplay card demo_valid                 # data/demo_valid/README.md
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from storage.configcli import DataRoot, fail
from storage.manifest import resolve_root


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report(run_id: Annotated[str, typer.Argument(help="The loop run (a folder of <data root>/runs).")],
               out: Annotated[Optional[Path], typer.Option(
                   "--out", help="Where to write the page (default: <data root>/runs/RUN_ID/report.html).")] = None,
               tokenizer: Annotated[Optional[str], typer.Option(
                   "--tokenizer", help="Model or tokenizer folder for the token lengths (default: the run's "
                   "base model, else the embedded model).")] = None,
               data_root: DataRoot = None) -> None:
        """Write a loop run's report: stages, validation funnel, trajectory mixes and lengths, training
        curves, held-out exact match, label spend and examiner task difficulty, as one HTML page with its
        plots embedded (no other files, no scripts). A part the run has no data for says so in one line.
        Prints the page's path."""
        from flows.loop_stages import report_parts
        from reports import write_report

        try:
            path = write_report(resolve_root(data_root), run_id, out, tokenizer, report_parts())
        except (FileNotFoundError, ValueError) as e:
            fail(str(e))
        typer.echo(str(path))

    @app.command("card")
    def card(dataset: Annotated[str, typer.Argument(help="The dataset (a folder of the data root).")],
             license: Annotated[Optional[str], typer.Option(
                 "--license", help="License identifier for the card (default: one a run record names, "
                 "else 'other').")] = None,
             data_root: DataRoot = None) -> None:
        """Write a dataset's card, README.md in its folder, with the YAML front matter Hugging Face datasets
        reads: one config per record kind over exactly its committed shards, features, sizes, source datasets
        and license; then `datasets.load_dataset(FOLDER, KIND)` loads it. Prints the card's path."""
        from storage.card import write_card

        try:
            path = write_card(resolve_root(data_root), dataset, license)
        except (FileNotFoundError, ValueError) as e:
            fail(str(e))
        typer.echo(str(path))

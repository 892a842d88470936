"""Options shared by every `forgeplay` command (data root, output format)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from storage.manifest import resolve_root

DataRoot = Annotated[
    Optional[Path],
    typer.Option("--data-root", envvar="FORGEPLAY_DATA", show_envvar=True,
                 help="Root folder of all datasets (default: $FORGEPLAY_DATA, else ./data)."),
]


def root(value: Optional[Path]) -> Path:
    return resolve_root(value)

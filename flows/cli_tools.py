"""Tool bank commands: `forgeplay tools import` (bring your own OpenAI function-calling
tools, one JSON object per line, e.g. ToolForge's tool bank) and `forgeplay tools list`.
Parsing, checking and argument filling live in generators.tools.imported and
generators.tools.fill; this module only calls them and prints.

    forgeplay tools import person_information_search.jsonl --dataset demo --domain person
    forgeplay tools list --dataset demo
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from generators.tools.base import DOMAINS, GENERAL, parameters_of
from storage import manifest
from storage.configcli import DataRoot, fail
from storage.manifest import resolve_root

console = Console()
err = Console(stderr=True, highlight=False, soft_wrap=True)
tools_app = typer.Typer(no_args_is_help=True, help="The virtual tool bank: import your own tools, list a dataset's tools.")
Domain = Enum("Domain", {d: d for d in DOMAINS}, type=str)


def _dataset(name: str) -> str:
    try:
        return manifest.check_name("dataset name", name)
    except ValueError as e:
        fail(str(e))


FILE_HELP = 'JSON Lines: one {"name", "description", "parameters"} tool per line.'
DOMAIN_HELP = ("Domain of the imported tools: the documents they search, as that domain's base tool does "
               "(general: all documents).")


@tools_app.command("import")
def import_(file: Annotated[Path, typer.Argument(help=FILE_HELP)],
            dataset: Annotated[str, typer.Option("--dataset", help="Dataset whose tool bank the tools join.")],
            domain: Annotated[Domain, typer.Option(help=DOMAIN_HELP)] = Domain(GENERAL),
            data_root: DataRoot = None) -> None:
    """Import OpenAI function-calling tools into a dataset's tool bank.

    Synthesis of the dataset then offers and calls them beside the base tools: the lookup goes into the query-like argument, entity names into name arguments, every required argument gets a schema-valid value, and the simulator answers them with its BM25 search. Bad lines are reported as FILE:LINE: reason and skipped; importing the same tools again writes nothing twice. Exits with 1 when no line gave a usable tool.
    """
    from generators.tools.imported import RUN_ID, import_file

    name = _dataset(dataset)
    if not file.is_file():
        fail(f"no such file: {file}")
    try:
        report = import_file(file, resolve_root(data_root), name, domain.value)
    except (OSError, UnicodeDecodeError) as e:
        fail(f"cannot read {file}: {e}")
    for line, reason in report.problems:
        err.print(f"{file}:{line}: {reason}", markup=False)
    console.print(f"{file.name} -> {name} (run {RUN_ID}, domain {domain.value}): {report.written} new tools, "
                  f"{len(report.present)} already there, {len(report.problems)} lines skipped of {report.lines}")
    if not report.rows and not report.present:
        err.print(f"[red]error:[/red] no tool in {file} could be imported")
        raise typer.Exit(1)


@tools_app.command("list")
def list_(dataset: Annotated[str, typer.Option("--dataset", help="Dataset whose tools to list.")],
          data_root: DataRoot = None) -> None:
    """List a dataset's tools (base, variants and imported) with the argument that carries the lookup."""
    from generators.tools.fill import roles_of
    from generators.tools.imported import is_imported
    from storage import load_table

    rows = {r["tool_id"]: r for r in load_table(_dataset(dataset), "tools", resolve_root(data_root)).to_pylist()}
    if not rows:
        fail(f"dataset {dataset!r} has no tools yet: run `forgeplay synthesize` or `forgeplay tools import`")
    t = Table(title=f"{dataset}: {len(rows)} tools")
    for c in ("name", "domain", "source", "lookup", "required"):
        t.add_column(c, overflow="fold")
    for r in sorted(rows.values(), key=lambda r: (r["domain"], r["name"])):
        params = parameters_of(r)
        source = "import" if is_imported(r) else "base" if json.loads(r.get("meta") or "{}").get("base") else "variant"
        t.add_row(r["name"], r["domain"], source, roles_of(params).lookup or "-",
                  ", ".join(params.get("required") or []))
    console.print(t)


def register(app: typer.Typer) -> None:
    """Add the `tools` command group to the main app."""
    app.add_typer(tools_app, name="tools")

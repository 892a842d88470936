"""How `forgeplay` starts: the light commands import neither torch nor Prefect (each command's
module is imported when it runs, flows/cli.py), and the command table names what each module
registers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from flows.cli import COMMANDS
from storage import write_rows
from storage.samples import SAMPLES

REPO = Path(__file__).resolve().parents[2]

# runs the command line in this process, then writes what the process imported
RUN = """
import json, sys
from flows.cli import main
out, sys.argv = sys.argv[1], ["forgeplay", *json.loads(sys.argv[2])]
try:
    main()
except SystemExit as e:
    code = e.code
heavy = sorted(m for m in ("torch", "prefect", "transformers") if m in sys.modules)
open(out, "w").write(json.dumps({"code": code, "heavy": heavy}))
"""


def env_for(root: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "FORGEPLAY_PREFECT")}
    return {**env, "FORGEPLAY_DATA": str(root), "PYTHONPATH": str(REPO), "COLUMNS": "200"}


def run_cli(args: list[str], root: Path, tmp_path: Path) -> tuple[dict, subprocess.CompletedProcess]:
    out = tmp_path / f"modules-{abs(hash(tuple(args)))}.json"
    p = subprocess.run([sys.executable, "-c", RUN, str(out), json.dumps(args)], cwd=tmp_path, env=env_for(root),
                       capture_output=True, text=True, timeout=300)
    assert out.exists(), p.stderr
    return json.loads(out.read_text()), p


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A data root with dataset "demo": a few trajectories and a document."""
    root = tmp_path_factory.mktemp("start")
    rows = [dict(SAMPLES["trajectories"], traj_id=f"t{i}", answer=f"a{i}") for i in range(3)]
    write_rows(root, "demo", "trajectories", "r1", rows)
    write_rows(root, "demo", "documents", "r1", [SAMPLES["documents"]])
    return root


LIGHT = [["--help"], ["sql", "SELECT 1"], ["datasets"], ["inspect", "demo"], ["verify"], ["card", "demo"],
         ["validate", "--help"], ["train", "sft", "--help"]]


@pytest.mark.parametrize("args", LIGHT, ids=[" ".join(a[:2]) for a in LIGHT])
def test_light_commands_import_neither_torch_nor_prefect(tiny, tmp_path, args):
    got, p = run_cli(args, tiny, tmp_path)
    assert got["code"] in (0, None), p.stdout + p.stderr
    assert got["heavy"] == [], f"forgeplay {' '.join(args)} imported {got['heavy']}"
    if args[0] == "sql":
        assert "1" in p.stdout
    if args[0] == "card":
        assert (tiny / "demo" / "README.md").exists()


def test_the_command_table_names_what_each_module_registers():
    """COMMANDS (flows/cli.py) lists every command a cli_* module registers, under its module,
    and nothing else: --help lists them all, and a command runs from its own module."""
    registered = {}
    for module in dict.fromkeys(COMMANDS.values()):
        app = typer.Typer()
        __import__(f"flows.{module}", fromlist=["register"]).register(app)
        for name in typer.main.get_group(app).commands:
            registered[name] = module
    assert registered == COMMANDS
    on_disk = {p.stem for p in (REPO / "flows").glob("cli_*.py")}
    assert on_disk == set(COMMANDS.values())

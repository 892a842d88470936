"""How `forgeplay` starts: the light commands import neither torch nor Prefect (each command's
module is imported when it runs, flows/cli.py), the command table names what each module
registers, and a mistake in an option or in a name it gives (a dataset, a backend, a model,
`--input` without `--out`) is one line and exit code 2 before any model loads or any Prefect
server starts: the process that made it has imported neither torch nor Prefect."""

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


LIGHT = [["--help"], ["--version"], ["sql", "SELECT 1"], ["datasets"], ["inspect", "demo"], ["show", "demo", "t1"],
         ["show", "demo", "t1", "--format", "json"], ["verify"], ["card", "demo"],
         ["validate", "--help"], ["train", "sft", "--help"], ["train", "plan", "--model-size", "7e9", "--nproc", "8"]]


@pytest.mark.parametrize("args", LIGHT, ids=[" ".join(a) for a in LIGHT])
def test_light_commands_import_neither_torch_nor_prefect(tiny, tmp_path, args):
    got, p = run_cli(args, tiny, tmp_path)
    assert got["code"] in (0, None), p.stdout + p.stderr
    assert got["heavy"] == [], f"forgeplay {' '.join(args)} imported {got['heavy']}"
    if args[0] == "sql":
        assert "1" in p.stdout
    if args[0] == "--version":
        assert p.stdout.startswith("forgeplay ")
    if args[0] == "show":
        assert "Where was Ada born?" in p.stdout
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


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """A data root with a small world "w": documents and triples, no trajectories."""
    from generators.corpus.build import WorldConfig, write

    root = tmp_path_factory.mktemp("mistakes")
    write(WorldConfig(seed=3, entities=50), root, "w")
    (root / "theirs.jsonl").write_text(json.dumps(SAMPLES["trajectories"]) + "\n")
    (root / "loop.json").write_text(json.dumps({"model": str(root / "no-such-model")}))
    return root


# (command line, a part of its one error line); the data root holds "w" (world_fixture)
MISTAKES = [
    (["show", "nope", "x"], "no dataset 'nope' under"),
    (["show", "w", "x"], "no record 'x' in dataset 'w'"),
    (["train", "sft", "--dataset", "demo_vlaid", "--out", "x"], "--dataset 'demo_vlaid' has no trajectories rows"),
    (["train", "sft", "--dataset", "w", "--out", "x"], "--dataset 'w' has no trajectories rows"),
    (["train", "grpo", "--dataset", "nope", "--out", "x"], "--dataset 'nope' has no triples rows"),
    (["train", "grpo", "--dataset", "w", "--out", "x", "--model", "/no/such/model"], "--model: unknown model"),
    (["train", "eval", "--dataset", "nope"], "--dataset 'nope' has no triples rows"),
    (["validate", "--input", "{root}/theirs.jsonl"], "--input needs --out"),
    (["validate", "--dataset", "nope"], "--dataset 'nope' has no trajectories rows"),
    (["validate", "--dataset", "w", "--kind", "triples", "--corpus", "nope"], "--corpus 'nope' has no documents"),
    (["validate", "--dataset", "w", "--kind", "triples", "--layers", "schema,judge", "--backend", "nope"],
     "unknown --backend 'nope'"),
    (["synthesize", "--dataset", "nope"], "--dataset 'nope' has no triples rows"),
    (["synthesize", "--dataset", "w", "--backend", "nope"], "unknown --backend 'nope'"),
    (["synthesize", "--dataset", "w", "--model", "/no/such/model"], "--model: unknown model"),
    (["export", "verl", "--dataset", "nope", "--out", "x"], "--dataset 'nope' has no"),
    (["export", "trl", "--dataset", "nope", "--out", "x"], "--dataset 'nope' has no"),
    (["selfplay", "run", "--dataset", "nope", "--no-train"], "--dataset 'nope' has no triples rows"),
    (["selfplay", "run", "--dataset", "w", "--no-train", "--student", "/no/such/model"], "--student: unknown model"),
    (["selfplay", "warmstart", "--dataset", "nope"], "--dataset 'nope' has no triples rows"),
    (["acquire-labels", "--dataset", "nope"], "--dataset 'nope' has no triples rows"),
    (["acquire-labels", "--dataset", "w", "--rollout-backend", "nope"], "unknown --rollout-backend 'nope'"),
    (["acquire-labels", "--dataset", "w", "--rollout-backend", "vllm"],
     "--rollout-backend vllm cannot run rollouts of a model folder here: choose one of transformers, vllm-server, openai"),
    (["train", "grpo", "--dataset", "w", "--out", "x", "--rollout-backend", "openai"],
     "--rollout-backend openai cannot sample from the weights being trained here"),
    (["selfplay", "run", "--dataset", "w", "--no-train", "--rollout-backend", "vllm"],
     "--rollout-backend vllm cannot let several models take turns here: choose one of transformers, vllm-server"),
    (["pipeline", "--backend", "nope"], "unknown --backend 'nope'"),
    (["run", "--config", "{root}/loop.json"], "model: unknown model"),
    (["--prefect", "validate", "--input", "{root}/theirs.jsonl"], "--input needs --out"),
    (["--prefect", "train", "sft", "--dataset", "nope", "--out", "x"], "--dataset 'nope' has no trajectories rows"),
]


@pytest.mark.parametrize("args,error", MISTAKES, ids=[" ".join(a[:3]) for a, _ in MISTAKES])
def test_a_mistake_is_one_line_before_any_model_or_server(world, tmp_path, args, error):
    args = [a.replace("{root}", str(world)) for a in args]
    got, p = run_cli(args, world, tmp_path)
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert got["code"] == 2, p.stdout + p.stderr
    assert len(lines) == 1 and error in lines[0], p.stderr
    assert got["heavy"] == [], f"forgeplay {' '.join(args)} imported {got['heavy']} before it refused"

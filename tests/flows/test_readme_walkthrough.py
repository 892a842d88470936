"""README's walkthrough runs as written: every command of its first two blocks ("A first
dataset in a minute", "Your own corpus", the latter on the example `mine.jsonl` README shows)
runs in order on an empty data root and succeeds; synthesis is given `--texts template` where
README leaves the model to write the texts (the model's words are not what is checked here),
and `TRAJ_ID` is the first accepted trajectory. `forgeplay show` of the imported corpus then
prints the conversation README quotes, line for line."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from storage import load_table

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def block(heading: str, lang: str = "bash") -> str:
    """The first ```lang block under `heading`."""
    text = README[README.index(heading + "\n"):]
    return re.search(rf"```{lang}\n(.*?)```", text, re.S).group(1)


def commands(heading: str) -> list[list[str]]:
    out = []
    for line in block(heading).splitlines():
        args = shlex.split(line, comments=True)
        if args:
            assert args[0] == "forgeplay", line
            out.append(args[1:])
    return out


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `corpus import mine.jsonl` reads the file README shows, here
    (tmp_path / "mine.jsonl").write_text(block("### Your own corpus", "json"))
    return tmp_path / "data"


def run(root: Path, args: list[str]) -> str:
    if args[0] == "synthesize" and "--texts" not in args:
        args = [*args, "--texts", "template"]
    if "TRAJ_ID" in args:
        args[args.index("TRAJ_ID")] = load_table("demo_valid", "trajectories", root).column("traj_id")[0].as_py()
    res = CliRunner().invoke(app, ["--data-root", str(root), *args], env={"COLUMNS": "200"})
    assert res.exit_code == 0, f"forgeplay {shlex.join(args)}:\n{res.output}"
    return res.output


def test_the_walkthrough_commands_run_in_order(root):
    first = commands("### A first dataset in a minute")
    assert [a[0] for a in first] == ["corpus", "synthesize", "validate", "sql", "show"]
    outputs = [run(root, args) for args in first]
    assert "verdicts (demo): accepted by" in outputs[-1] and "lineage:" in outputs[-1]
    mine = commands("### Your own corpus")
    assert [a[0] for a in mine] == ["corpus", "synthesize", "validate"]
    for args in mine:
        run(root, args)
    quoted = block("## What the output looks like", "")
    traj_id = re.match(r"trajectory (\w+) in mine_valid", quoted).group(1)
    shown = run(root, ["show", "mine_valid", traj_id]).splitlines()
    for line in quoted.splitlines():  # every line README quotes, but its cuts and the time of the run
        if line != "[...]" and "created:" not in line:
            assert line in shown, f"README quotes {line!r}; forgeplay show prints:\n" + "\n".join(shown)

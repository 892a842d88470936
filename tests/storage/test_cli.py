"""The dataset commands of the `forgeplay` CLI, run as a user would (real Typer app)."""

import csv
import io
import json
import subprocess
import sys

import click
import pyarrow.parquet as pq
import pytest
import typer.main
from typer.testing import CliRunner

from flows.cli import app
from storage import write_rows
from storage.samples import SAMPLES

runner = CliRunner()


def all_commands(cmd, path=()):
    """Every command under `cmd`, through the group API (the root group loads a command's
    module when asked for it, flows/cli.py)."""
    yield path, cmd
    if hasattr(cmd, "list_commands"):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            yield from all_commands(cmd.get_command(ctx, name), path + (name,))


def test_every_command_has_help():
    root = typer.main.get_command(app)
    seen = 0
    for path, cmd in all_commands(root):
        res = runner.invoke(app, [*path, "--help"])
        assert res.exit_code == 0, (path, res.output)
        assert "Usage" in res.output
        if path:
            assert cmd.help, f"forgeplay {' '.join(path)} has no help text"
        seen += 1
    assert seen >= 38  # the root, 20 commands and the subcommands of the groups


@pytest.fixture
def demo(data_root):
    rows = [dict(SAMPLES["trajectories"], traj_id=f"t{i}", answer=f"a{i}") for i in range(5)]
    write_rows(None, "demo", "trajectories", "r1", rows, rows_per_shard=2)
    write_rows(None, "demo", "documents", "r1", [SAMPLES["documents"]])
    return data_root


def test_datasets_lists_kinds_runs_shards_rows(demo):
    res = runner.invoke(app, ["datasets", "-f", "json"])
    assert res.exit_code == 0, res.output
    got = {(r["dataset"], r["kind"], r["run_id"]): (r["shards"], r["rows"]) for r in map(json.loads, res.stdout.splitlines())}
    assert got == {("demo", "trajectories", "r1"): (3, 5), ("demo", "documents", "r1"): (1, 1)}
    table = runner.invoke(app, ["datasets"]).output
    assert "trajectories" in table and "documents" in table


def test_sql_formats_and_out_files(demo, tmp_path):
    res = runner.invoke(app, ["sql", "SELECT traj_id, answer FROM demo_trajectories ORDER BY traj_id", "-f", "csv"])
    assert res.exit_code == 0, res.output
    rows = list(csv.reader(io.StringIO(res.stdout)))
    assert rows[0] == ["traj_id", "answer"] and rows[1:] == [[f"t{i}", f"a{i}"] for i in range(5)]
    res = runner.invoke(app, ["sql", "SELECT count(*) AS n FROM demo_trajectories", "--format", "json"])
    assert json.loads(res.stdout) == {"n": 5}
    res = runner.invoke(app, ["sql", "SELECT count(*) AS n FROM demo_trajectories"])
    assert "5" in res.output
    for ext in ("parquet", "csv", "json"):
        out = tmp_path / f"out.{ext}"
        res = runner.invoke(app, ["sql", "SELECT * FROM demo_trajectories", "--out", str(out)])
        assert res.exit_code == 0 and out.exists(), res.output
    assert pq.read_table(tmp_path / "out.parquet").num_rows == 5


def test_sql_error_is_readable(demo):
    res = runner.invoke(app, ["sql", "SELECT * FROM nope"])
    assert res.exit_code == 2
    assert "SQL error" in res.output and "demo_trajectories" in res.output
    res = runner.invoke(app, ["sql", "SELECT 1", "--out", "x.txt"])
    assert res.exit_code == 2 and ".parquet, .csv or .json" in res.output


def test_inspect_shows_schema_counts_rows(demo):
    res = runner.invoke(app, ["inspect", "demo", "-n", "1"])
    assert res.exit_code == 0, res.output
    assert "demo / trajectories" in res.output and "messages" in res.output and "r1" in res.output
    res = runner.invoke(app, ["inspect", "nothere"])
    assert res.exit_code == 2 and "no dataset" in res.output


def test_data_root_flag_env_and_default(tmp_path, monkeypatch):
    rows = [SAMPLES["documents"]]
    write_rows(tmp_path / "a", "alpha", "documents", "r1", rows)
    write_rows(tmp_path / "b", "beta", "documents", "r1", rows)
    write_rows(tmp_path / "c" / "data", "gamma", "documents", "r1", rows)
    monkeypatch.setenv("FORGEPLAY_DATA", str(tmp_path / "b"))
    q = "SELECT 1 FROM information_schema.tables WHERE table_name LIKE '%_documents'"
    assert "beta" in runner.invoke(app, ["datasets"]).output
    assert "alpha" in runner.invoke(app, ["datasets", "--data-root", str(tmp_path / "a")]).output
    assert "alpha" in runner.invoke(app, ["--data-root", str(tmp_path / "a"), "datasets"]).output
    monkeypatch.delenv("FORGEPLAY_DATA")
    monkeypatch.chdir(tmp_path / "c")
    assert "gamma" in runner.invoke(app, ["datasets"]).output
    assert runner.invoke(app, ["sql", q, "-f", "csv"]).exit_code == 0


def test_verify_command_reports_bad_shard_path(demo):
    part = next((demo / "demo" / "trajectories").rglob("part-*.parquet"))
    part.write_bytes(part.read_bytes()[:-10])
    res = runner.invoke(app, ["verify"])
    assert res.exit_code == 1
    assert "size_mismatch" in res.output and part.name in res.output.replace("\n", "")
    res = runner.invoke(app, ["sql", "SELECT count(*) AS n FROM demo_trajectories", "-f", "json"])
    assert res.exit_code == 0 and json.loads(res.stdout.strip().splitlines()[-1])["n"] in (3, 4)


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "flows.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "datasets" in out.stdout

"""The judge layer against the stand-in engine (real HTTP on 127.0.0.1, real flow and
Parquet): a `forgeplay validate --layers judge` run killed with SIGKILL mid-stage resumes to
the verdicts of an uninterrupted run, and the engine received no completed request twice
(the run's journal answered them); a 401 stops it with one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import flows.validate as fv
from generators.llm.registry import BackendConfig
from generators.llm.standin_engine import StandinEngine
from storage import load_table
from storage.journal import journal_path
from tests.engine_kill import kill_once_journaled
from validators.validator import ValidateConfig

REPO = Path(__file__).resolve().parents[2]


def _copy(world, tmp_path: Path, name: str) -> Path:
    shutil.copytree(world[0], tmp_path / name)
    return tmp_path / name


def _args(root: Path, url: str) -> list[str]:
    return ["validate", "--dataset", "w", "--layers", "judge", "--chunk", "5", "--run-id", "j1",
            "--backend", "openai", "--base-url", url, "--model", "standin", "--data-root", str(root)]


def _verdicts(root: Path) -> list[dict]:
    try:
        rows = load_table("w", "verdicts", root, run_id="j1").to_pylist()
    except Exception:  # nothing committed yet
        return []
    return sorted(({k: v for k, v in r.items() if k != "created_at"} for r in rows), key=lambda r: r["id"])


def test_judge_killed_mid_stage_resumes_and_pays_nothing_twice(world, tmp_path):
    cfg = ValidateConfig(dataset="w", layers="judge", chunk=5, run_id="j1")
    with StandinEngine(slots=2, latency=0.05) as engine:
        bcfg = BackendConfig(backend="openai", base_url=engine.url, model="standin")
        clean_root = _copy(world, tmp_path, "clean")
        fv.run(cfg, bcfg, clean_root, progress=False)
        expected = _verdicts(clean_root)
        assert len(expected) == len(world[1])

        engine.reset_counts()
        root = _copy(world, tmp_path, "killed")
        journal = journal_path(root, "w", "j1")
        proc = subprocess.Popen([sys.executable, "-m", "flows.cli", *_args(root, engine.url)], cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        kill_once_journaled(proc, engine, journal, lambda: len(_verdicts(root)) >= 5, "5 verdicts")
        assert 0 < len(_verdicts(root)) < len(expected)
        fv.run(cfg, bcfg, root, progress=False)
        assert _verdicts(root) == expected
        assert engine.repaid == 0 and engine.twice_completed() == 0
        assert not journal.exists()


def test_judge_stops_at_a_401_with_one_line(world, tmp_path):
    from flows.cli import app

    with StandinEngine(slots=4, latency=0.0, unauthorized=True) as engine:
        res = CliRunner().invoke(app, _args(_copy(world, tmp_path, "denied"), engine.url))
        lines = [line for line in res.output.splitlines() if line.strip() and "%|" not in line]
        assert res.exit_code != 0 and len(lines) == 1, res.output
        assert "HTTP 401" in lines[0] and engine.url in lines[0] and engine.completed == 0

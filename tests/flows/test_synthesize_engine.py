"""`forgeplay synthesize --texts llm --backend openai` against the stand-in engine
(generators/llm/standin_engine.py: real HTTP on 127.0.0.1, real flows, real Parquet): a run
killed with SIGKILL mid-stage resumes to the rows of an uninterrupted run and pays for no
answer twice; 503s, timeouts and a restart leave the rows as a clean run's; a 401 stops the
stage at once with one line; the scripted backend and the engine give the same rows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, make_dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.synthesize import run, synthesize_flow
from generators.corpus.build import WorldConfig, write
from generators.llm.registry import BACKENDS, BackendConfig, Kind
from generators.llm.scripted import ScriptedBackend
from generators.llm.standin_engine import StandinEngine
from generators.synth.synthesize import SynthConfig
from storage import load_table
from storage.journal import journal_path
from tests.engine_kill import journal_lines, kill_once_journaled, wait

REPO = Path(__file__).resolve().parents[2]
N, CHUNK = 36, 6


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A small world, copied into a fresh data root per run (`fresh`)."""
    root = tmp_path_factory.mktemp("world") / "data"
    write(WorldConfig(seed=3, entities=200), root, "w")
    return root


def fresh(world: Path, tmp_path: Path, name: str) -> Path:
    import shutil

    out = tmp_path / name
    shutil.copytree(world, out)
    return out


def rows(root: Path, keep_lineage: bool = True) -> list[dict]:
    """The run's trajectories, by id, without their commit time (and lineage, if asked)."""
    drop = {"created_at"} | (set() if keep_lineage else {"lineage"})
    got = [{k: v for k, v in r.items() if k not in drop} for r in load_table("w", "trajectories", root).to_pylist()]
    return sorted(got, key=lambda r: r["traj_id"])


def _cfgs(url: str, **kw) -> tuple[SynthConfig, BackendConfig]:
    return (SynthConfig(dataset="w", n=N, chunk=CHUNK, variants_per_tool=1),
            BackendConfig(backend="openai", base_url=url, model="standin", **kw))


def _args(root: Path, url: str) -> list[str]:
    return ["synthesize", "--dataset", "w", "--n", str(N), "--chunk", str(CHUNK), "--variants-per-tool", "1",
            "--texts", "llm", "--backend", "openai", "--base-url", url, "--model", "standin",
            "--data-root", str(root)]


def _committed(root: Path) -> int:
    try:
        return load_table("w", "trajectories", root, columns=["traj_id"]).num_rows
    except Exception:  # nothing committed yet
        return 0


def test_sigterm_stops_the_stage_says_how_to_resume_and_the_rerun_completes(world, tmp_path):
    """SIGTERM (flows/interrupt.py) stops a run the way Ctrl-C does: exit 143 with one line on how
    to resume, no traceback, the committed chunks kept; the rerun gives an uninterrupted run's rows."""
    with StandinEngine(slots=2, latency=0.2) as engine:
        clean_root = fresh(world, tmp_path, "clean")
        run(*_cfgs(engine.url), clean_root, progress=False)
        root = fresh(world, tmp_path, "stopped")
        proc = subprocess.Popen([sys.executable, "-m", "flows.cli", *_args(root, engine.url)], cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait(lambda: _committed(root) >= CHUNK or proc.poll() is not None, what="a committed chunk")
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            err = proc.communicate(timeout=60)[1].decode()
        finally:
            if proc.poll() is None:
                proc.kill()
        took = time.monotonic() - sent
        assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
        assert "stopped by SIGTERM; run the same command again to resume" in err and "Traceback" not in err
        assert 0 < _committed(root) < N, f"the stage went on for {took:.1f} s after SIGTERM"
        run(*_cfgs(engine.url), root, progress=False)
        assert rows(root) == rows(clean_root)


def test_killed_mid_stage_resumes_to_the_same_rows_and_pays_nothing_twice(world, tmp_path):
    with StandinEngine(slots=4, latency=0.05) as engine:
        clean_root = fresh(world, tmp_path, "clean")
        clean = run(*_cfgs(engine.url), clean_root, progress=False)
        expected = rows(clean_root)
        assert len(expected) == N and not journal_path(clean_root, "w", clean["run_id"]).exists()

        engine.reset_counts()
        root = fresh(world, tmp_path, "killed")
        proc = subprocess.Popen([sys.executable, "-m", "flows.cli", *_args(root, engine.url)], cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        journal = journal_path(root, "w", clean["run_id"])
        kill_once_journaled(proc, engine, journal, lambda: _committed(root) >= CHUNK, "a committed chunk")
        paid_before = engine.completed
        assert 0 < _committed(root) < N and journal_lines(journal) > 0

        resumed = run(*_cfgs(engine.url), root, progress=False)
        assert resumed["run_id"] == clean["run_id"] and resumed["usage"]["journaled"] > 0
        assert rows(root) == expected
        assert engine.repaid == 0 and engine.twice_completed() == 0  # no completed request asked again
        assert engine.completed > paid_before  # the rest was asked for after the resume
        assert not journal.exists()


def test_503s_timeouts_and_a_restart_leave_the_rows_of_a_clean_run(world, tmp_path):
    with StandinEngine(slots=8, latency=0.02, hang=5.0, down=0.5) as engine:
        clean_root = fresh(world, tmp_path, "clean")
        run(*_cfgs(engine.url), clean_root, progress=False)
        expected = rows(clean_root)
        engine.reset_counts()
        engine.fail_503, engine.timeouts, engine.restart_at = 0.15, 0.03, 60
        root = fresh(world, tmp_path, "faulty")
        summary = run(*_cfgs(engine.url, timeout=1.0), root, progress=False)  # the pace is no part of the run id
        assert engine.answered_503 > 0 and engine.timed_out > 0 and engine.dropped > 0
        assert summary["usage"]["retries"] >= engine.answered_503 + engine.timed_out
    got = rows(root)
    assert [r["traj_id"] for r in got] == [r["traj_id"] for r in expected]  # nothing lost, nothing twice
    assert got == expected


def test_a_401_stops_the_stage_at_once_with_one_line(world, tmp_path):
    from flows.cli import app

    with StandinEngine(slots=8, latency=0.01, unauthorized=True) as engine:
        root = fresh(world, tmp_path, "denied")
        res = CliRunner().invoke(app, _args(root, engine.url))
        assert res.exit_code != 0
        lines = [line for line in res.output.splitlines() if line.strip() and "%|" not in line]  # no bars
        assert len(lines) == 1, res.output
        assert "HTTP 401" in lines[0] and "127.0.0.1" in lines[0] and "request" in lines[0]
        assert engine.completed == 0 and max(engine.received_by_key.values()) == 1  # not retried
    assert _committed(root) == 0


def test_scripted_backend_and_engine_give_identical_rows(world, tmp_path, monkeypatch):
    monkeypatch.setitem(BACKENDS, "scripted", Kind(make_dataclass("NoOptions", []), lambda opts, journal=None: ScriptedBackend()))
    synth = SynthConfig(dataset="w", n=N, chunk=CHUNK, variants_per_tool=1, run_id="same")
    assert synth.seed % 7 == 0  # the engine's reply to seed s is the scripted reply at batch index s
    scripted_root, served_root = fresh(world, tmp_path, "scripted"), fresh(world, tmp_path, "served")
    synthesize_flow(asdict(synth), asdict(BackendConfig(backend="scripted")), str(scripted_root), False)
    with StandinEngine(slots=16, latency=0.0) as engine:
        synthesize_flow(asdict(synth), asdict(BackendConfig(backend="openai", base_url=engine.url, model="standin")),
                        str(served_root), False)
    scripted, served = rows(scripted_root, keep_lineage=False), rows(served_root, keep_lineage=False)
    assert len(served) == N and served == scripted
    assert any('"llm"' in r["meta"] for r in served)  # the model's texts made it into rows

"""The validate flow on Prefect task runners: one worker (threads in the flow process) and a
pool of two processes give the same verdicts and accepted records, chunk by chunk, on a mix
of clean, corrupted and duplicated trajectories (dedup runs in record order across chunks)."""

import copy
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.runners import make_task_runner
from flows.validate import run
from storage import load_table, write_rows
from storage.schema import SHARED_COLUMNS
from validators.validator import ValidateConfig

REPO = Path(__file__).resolve().parents[2]
VERDICT_COLS = ("record_id", "record_kind", "layer", "check", "passed", "reason", "score", "detail")


def mixed_dataset(root, world_rows, docs, bank) -> list[dict]:
    """Dataset "mix": the world's documents and tools, clean trajectories, wrong answers and
    exact copies under new ids (so dedup must see earlier chunks first)."""
    plain = [{k: v for k, v in r.items() if k not in SHARED_COLUMNS} for r in copy.deepcopy(world_rows)]
    rows = [dict(r, id=r["traj_id"]) for r in plain]
    for r in copy.deepcopy(plain[:8]):
        r["traj_id"] = r["id"] = r["traj_id"] + "-wrong"
        r["messages"][-1]["content"] = "<think>x</think><answer>Quentin Zarvox</answer>"
        rows.append(r)
    for r in copy.deepcopy(plain[:10]):
        r["traj_id"] = r["id"] = r["traj_id"] + "-copy"
        rows.append(r)
    write_rows(root, "mix", "documents", "run", [{k: d[k] for k in ("doc_id", "title", "text", "source", "meta")}
                                                 for d in docs])
    write_rows(root, "mix", "tools", "run", bank)
    write_rows(root, "mix", "trajectories", "run", rows)
    return rows


def results(root, run_id):
    ver = load_table("mix", "verdicts", root, run_id=run_id).to_pylist()
    acc = load_table("mix_valid", "trajectories", root, run_id=run_id).to_pylist()
    return sorted(tuple(v[c] for c in VERDICT_COLS) for v in ver), sorted(a["id"] for a in acc)


def test_one_worker_and_a_process_pool_give_the_same_results(world, tmp_path):
    root, world_rows, docs, bank = world
    rows = mixed_dataset(tmp_path, world_rows, docs, bank)
    out = {}
    for workers in (1, 2):
        s = run(ValidateConfig(dataset="mix", chunk=7, workers=workers, run_id=f"w{workers}"),
                data_root=tmp_path, progress=False)
        assert s["rows_in"] == len(rows) == 58 and s["workers"] == workers
        out[workers] = results(tmp_path, f"w{workers}")
    assert out[1] == out[2]
    verdicts, accepted = out[1]
    reasons = {v[5] for v in verdicts if not v[4]}
    assert {"wrong_answer", "exact_duplicate"} <= reasons
    assert any(v[3] == "replay" and v[5] == "ok" for v in verdicts)  # workers really replayed the tool calls
    assert not any(a.endswith("-copy") or a.endswith("-wrong") for a in accepted) and len(accepted) >= 30


def test_task_runner_choice_and_bad_workers(tmp_path):
    assert type(make_task_runner("default", None, 1)).__name__ == "ThreadPoolTaskRunner"
    assert type(make_task_runner("default", None, 3)).__name__ == "ProcessPoolTaskRunner"
    with pytest.raises(ValueError, match="workers"):
        make_task_runner("default", None, 0)
    bad = subprocess.run([sys.executable, "-m", "flows.cli", "validate", "--dataset", "w", "--workers", "0"],
                         cwd=REPO, env={**os.environ, "FORGEPLAY_DATA": str(tmp_path), "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--workers must be >= 1" in bad.stderr


def test_pool_workers_report_to_the_flows_own_prefect_server(tmp_path):
    """`--workers 2` with no Prefect server configured: the pool's worker processes report
    their task runs to the flow process's temporary server. Before, each of them, finding no
    server configured, started a temporary server of its own: three servers for one run."""
    from generators.corpus.build import WorldConfig, write
    from generators.llm.cores import descendants

    write(WorldConfig(seed=5, entities=100), tmp_path, "k")
    env = {**os.environ, "FORGEPLAY_DATA": str(tmp_path), "PYTHONPATH": str(REPO)}
    env.pop("PREFECT_API_URL", None)
    p = subprocess.Popen([sys.executable, "-m", "flows.cli", "validate", "--dataset", "k", "--kind", "triples",
                          "--layers", "schema,rules", "--chunk", "10", "--workers", "2"], cwd=REPO, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    servers, pool = set(), set()
    while p.poll() is None:
        for pid in descendants(p.pid):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"prefect.server.api.server:create_app" in cmd:
                servers.add(pid)
            elif b"multiprocessing.spawn" in cmd:
                pool.add(pid)
        time.sleep(0.1)
    out, err = p.communicate()
    assert p.returncode == 0, err
    assert len(pool) >= 2, "the chunks did not go to a pool of processes"
    assert len(servers) == 1, f"{len(servers)} Prefect servers for one run"
    assert load_table("k_valid", "triples", tmp_path).num_rows > 0

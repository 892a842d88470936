"""A real SIGKILL: `forgeplay validate` (triples, 4-record chunks) runs in a subprocess, is
killed with SIGKILL (with its Prefect server: the whole process group) after some chunks
are committed and before the end, and is rerun to completion. No (record, layer, check) verdict and no accepted id appears twice, and the
verdicts and accepted ids equal those of an uninterrupted run in a separate data root."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from flows.validate import run
from storage import load_table
from storage.reader import entries
from validators.validator import ValidateConfig

REPO = Path(__file__).resolve().parents[2]
VERDICT_COLS = ("record_id", "record_kind", "layer", "check", "passed", "reason", "score", "detail")
ARGS = ["validate", "--dataset", "k", "--kind", "triples", "--layers", "schema,rules,dedup", "--chunk", "4"]


def cli(root, *extra) -> subprocess.Popen:
    env = {**os.environ, "FORGEPLAY_DATA": str(root), "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "flows.cli", *ARGS, *extra], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def verdict_shards(root) -> int:
    return len(entries(root, "k", "verdicts"))


def results(root):
    ver = load_table("k", "verdicts", root).to_pylist()
    acc = load_table("k_valid", "triples", root).column("id").to_pylist()
    return ver, acc


def test_sigkill_then_rerun_equals_an_uninterrupted_run(tmp_path):
    from generators.corpus.build import WorldConfig, write

    killed, clean = tmp_path / "killed", tmp_path / "clean"
    write(WorldConfig(seed=5, entities=200), killed, "k")
    shutil.copytree(killed, clean)
    n = len(load_table("k", "triples", killed))
    assert n >= 90

    p = cli(killed)
    deadline = time.monotonic() + 240
    while verdict_shards(killed) < 2:  # some chunks committed
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "no chunk committed in time"
        time.sleep(0.02)
    os.killpg(p.pid, signal.SIGKILL)  # the flow process and its Prefect server
    p.wait(timeout=30)
    assert p.returncode == -signal.SIGKILL
    ver_at_kill, _ = results(killed)
    assert 0 < len({v["record_id"] for v in ver_at_kill}) < n  # killed in the middle

    p = cli(killed)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]
    assert "already validated in this run" in " ".join(out.split())  # (the console wraps long lines)

    run(ValidateConfig(dataset="k", kind="triples", layers="schema,rules,dedup", chunk=4), data_root=clean, progress=False)
    ver, acc = results(killed)
    ref_ver, ref_acc = results(clean)
    keys = [(v["record_id"], v["layer"], v["check"]) for v in ver]
    assert len(keys) == len(set(keys)) and len(acc) == len(set(acc))
    assert len({v["record_id"] for v in ver}) == n
    assert sorted(tuple(v[c] for c in VERDICT_COLS) for v in ver) == sorted(tuple(v[c] for c in VERDICT_COLS) for v in ref_ver)
    assert sorted(acc) == sorted(ref_acc) and len(acc) >= n * 0.9

"""The validate flow on distributed task runners (flows/runners.py): a local Dask cluster of
two workers (started by the test on 127.0.0.1 and given as `--address`) and a local Ray
instance give the same verdicts and accepted ids as the default runner, on the mix of clean,
wrong and duplicated trajectories of test_flow_workers (dedup runs in record order across
chunks); and the runner choice fails with one line on a bad kind, a stray --address or a
missing extra. The Dask cluster the runner starts itself (no --address) runs the synthesis
chunks in tests/flows/test_synthesize_runners.py: one flow run per path keeps CI short."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from flows.runners import RunnerConfig, make_task_runner
from flows.validate import run
from tests.validators.test_flow_workers import REPO, mixed_dataset, results
from validators.validator import ValidateConfig


@pytest.fixture(scope="module")
def baseline(world, tmp_path_factory):
    """(data root with dataset "mix", the default runner's verdicts and accepted ids)."""
    root, world_rows, docs, bank = world
    tmp = tmp_path_factory.mktemp("runners")
    mixed_dataset(tmp, world_rows, docs, bank)
    run(ValidateConfig(dataset="mix", chunk=7, run_id="default"), data_root=tmp, progress=False)
    return tmp, results(tmp, "default")


def same_as_default(baseline, run_id: str, runner: RunnerConfig) -> None:
    root, (verdicts, accepted) = baseline
    s = run(ValidateConfig(dataset="mix", chunk=7, workers=2, run_id=run_id), data_root=root, progress=False,
            runner=runner)
    assert s["rows_in"] == 58 and s["rows_out"] == len(accepted)
    assert results(root, run_id) == (verdicts, accepted)
    reasons = {v[5] for v in verdicts if not v[4]}
    assert {"wrong_answer", "exact_duplicate"} <= reasons
    assert any(v[3] == "replay" and v[5] == "ok" for v in verdicts)  # the workers replayed the tool calls


def test_local_dask_cluster_at_an_address_gives_the_default_results(baseline):
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        same_as_default(baseline, "dask-address", RunnerConfig(task_runner="dask", address=cluster.scheduler_address))


@pytest.mark.skipif(importlib.util.find_spec("prefect_ray") is None, reason="prefect-ray is not installed")
def test_local_ray_gives_the_default_results(baseline):
    same_as_default(baseline, "ray", RunnerConfig(task_runner="ray"))


def test_local_clusters_bind_loopback_only():
    dask = make_task_runner("dask", None, 2)
    assert dask.cluster_kwargs["host"] == "127.0.0.1" and dask.cluster_kwargs["dashboard_address"] is None
    assert dask.cluster_kwargs["n_workers"] == 2
    assert make_task_runner("dask", "tcp://127.0.0.1:8786", 2).address == "tcp://127.0.0.1:8786"


def test_bad_runner_choices_fail_with_one_line(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="choose one of default, dask, ray"):
        make_task_runner("spark", None, 2)
    with pytest.raises(ValueError, match="--address needs --task-runner dask or ray"):
        make_task_runner("default", "tcp://127.0.0.1:8786", 2)
    monkeypatch.setitem(sys.modules, "prefect_ray", None)  # as if the extra were not installed
    with pytest.raises(ValueError, match=r"pip install 'forgeplay\[ray\]'"):
        make_task_runner("ray", None, 2)
    cli = ("import sys; sys.modules['prefect_ray'] = None; from flows.cli import main; "
           "sys.argv = ['forgeplay', 'validate', '--dataset', 'w', '--task-runner', 'ray']; main()")
    bad = subprocess.run([sys.executable, "-c", cli], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "FORGEPLAY_DATA": str(tmp_path), "PYTHONPATH": str(REPO)})
    assert bad.returncode == 2
    assert bad.stderr.strip() == "validate failed: --task-runner ray needs prefect-ray: pip install 'forgeplay[ray]'"


@pytest.mark.parametrize("mode", [[], ["--prefect"]], ids=["local", "prefect"])
def test_bad_input_found_inside_a_flow_is_one_line(tmp_path, mode):
    """An error of bad input raised inside the flow's body (a malformed --heldout file, read
    when dedup starts) is printed once, as one line, in a local run and in a Prefect flow run
    (whose engine logged it first with a traceback, after its temporary server started)."""
    from generators.corpus.build import WorldConfig, write

    write(WorldConfig(seed=3, entities=50), tmp_path, "w")
    heldout = tmp_path / "heldout.jsonl"
    heldout.write_text("{not json\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "FORGEPLAY_PREFECT")}
    bad = subprocess.run([sys.executable, "-m", "flows.cli", *mode, "validate", "--dataset", "w", "--kind", "triples",
                          "--layers", "schema,dedup", "--heldout", json.dumps([str(heldout)])], cwd=REPO,
                         capture_output=True, text=True, timeout=300,
                         env={**env, "FORGEPLAY_DATA": str(tmp_path), "PYTHONPATH": str(REPO),
                              "PREFECT_HOME": str(tmp_path / "prefect")})
    assert bad.returncode == 2, bad.stderr
    lines = [line for line in bad.stderr.splitlines() if line.strip() and "validate:" not in line]  # no progress bar
    assert len(lines) == 1 and lines[0].startswith(f"validate failed: {heldout} line 1"), bad.stderr

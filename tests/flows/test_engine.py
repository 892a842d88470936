"""How a flow runs (flows/engine.py): with no Prefect API configured a flow command runs in its
own process without Prefect (not even imported, so no temporary server) and writes exactly
the rows a Prefect flow run writes; `forgeplay --prefect` makes it a Prefect flow run recorded
with its artifacts (read back with the Prefect client); PREFECT_API_URL (environment or the
active Prefect profile) and FORGEPLAY_PREFECT choose Prefect; a local task retries as
Prefect would and a local flow's submitted tasks run on its own thread; a deployment's
entrypoint loads the Prefect flow again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from flows import engine
from flows.engine import flow, task
from storage import load_table

REPO = Path(__file__).resolve().parents[2]

# validate a world's triples through the command line in this process; with --prefect, read
# back this process's flow run and its table artifact from its temporary Prefect server
SCRIPT = """
import json, sys
from flows.cli import main
out, sys.argv = sys.argv[1], ["forgeplay", *json.loads(sys.argv[2])]
try:
    main()
except SystemExit as e:
    code = e.code
got = {"code": code, "prefect": "prefect" in sys.modules}
if "prefect" in sys.modules:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.server.api.server import SubprocessASGIServer

    got["server"] = SubprocessASGIServer._instances.get(None) is not None
    with get_client(sync_client=True) as c:
        got["runs"] = [(c.read_flow(r.flow_id).name, r.state.type.value) for r in c.read_flow_runs()]
        arts = c.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["validate-report-table"])))
        got["table"] = [json.loads(a.data) for a in arts]
open(out, "w").write(json.dumps(got))
"""


def validate_in(root: Path, tmp_path: Path, mode: list[str]) -> dict:
    from generators.corpus.build import WorldConfig, write

    write(WorldConfig(seed=3, entities=60), root, "w")
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "FORGEPLAY_PREFECT")}
    env.update(FORGEPLAY_DATA=str(root), PYTHONPATH=str(REPO), PREFECT_HOME=str(tmp_path / f"prefect{len(mode)}"))
    out = tmp_path / f"got{len(mode)}.json"
    args = [*mode, "validate", "--dataset", "w", "--kind", "triples", "--layers", "schema,rules,dedup", "--chunk", "25"]
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(out), json.dumps(args)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert out.exists() and p.returncode == 0, p.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["code"] in (0, None), p.stderr[-3000:]
    return got


def rows(root: Path, dataset: str, kind: str) -> list[tuple]:
    t = load_table(dataset, kind, root).drop_columns(["created_at"]).to_pylist()
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in t)


def test_a_flow_runs_here_without_prefect_and_writes_what_a_prefect_flow_run_writes(tmp_path):
    local = validate_in(tmp_path / "local", tmp_path, [])
    assert local["prefect"] is False  # not imported: no temporary server, no flow run
    recorded = validate_in(tmp_path / "prefect", tmp_path, ["--prefect"])
    assert recorded["prefect"] and recorded["server"]  # the temporary server this process started
    assert recorded["runs"] == [["validate", "COMPLETED"]]
    (table,) = recorded["table"]
    stages = {r["name"]: r for r in table if r["section"] == "stage"}
    accepted = load_table("w_valid", "triples", tmp_path / "prefect").num_rows
    assert stages["dedup"]["rows_out"] == accepted > 0
    for dataset, kind in (("w", "verdicts"), ("w_valid", "triples")):
        assert rows(tmp_path / "local", dataset, kind) == rows(tmp_path / "prefect", dataset, kind)
    records = {m: sorted(str(p.relative_to(tmp_path / m)) for p in (tmp_path / m).glob("*/_runs/*.json"))
               for m in ("local", "prefect")}
    assert records["local"] == records["prefect"] and len(records["local"]) >= 2  # the same run records on disk


def test_what_chooses_prefect(tmp_path, monkeypatch):
    for k in ("PREFECT_API_URL", "FORGEPLAY_PREFECT", "PREFECT_PROFILE", "PREFECT_PROFILES_PATH"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    assert not engine.prefect_wanted()
    monkeypatch.setenv("FORGEPLAY_PREFECT", "1")
    assert engine.prefect_wanted()
    monkeypatch.setenv("FORGEPLAY_PREFECT", "0")
    assert not engine.prefect_wanted()
    (tmp_path / "profiles.toml").write_text('active = "local"\n[profiles.ephemeral]\n'
                                            '[profiles.local]\nPREFECT_API_URL = "http://127.0.0.1:4200/api"\n')
    assert engine.prefect_wanted()  # `prefect config set PREFECT_API_URL=...` in the active profile
    monkeypatch.setenv("PREFECT_PROFILE", "ephemeral")
    assert not engine.prefect_wanted()
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert engine.prefect_wanted()
    monkeypatch.setenv("PREFECT_API_URL", "")  # set empty: none
    assert not engine.prefect_wanted()


def test_a_local_task_retries_as_prefect_would_and_submits_to_the_flows_thread(monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("FORGEPLAY_PREFECT", raising=False)
    monkeypatch.setenv("PREFECT_HOME", "/nonexistent")
    calls, threads = [], []

    @task(name="flaky", retries=2, retry_delay_seconds=[0, 0])
    def flaky(n: int) -> int:
        calls.append(n)
        if len(calls) < 3:
            raise OSError("transient")
        return n * 2

    @task(name="where")
    def where() -> str:
        threads.append(threading.current_thread().name)
        return "done"

    @flow(name="local")
    def local(n: int) -> tuple:
        return flaky(n), where.submit().result(), threading.current_thread().name

    doubled, done, flow_thread = local(21)
    assert (doubled, done, len(calls)) == (42, "done", 3)
    assert threads and threads[0] != flow_thread  # the flow's own thread, not the caller's
    calls.clear()
    with pytest.raises(OSError):  # retries exhausted: the last error
        task(name="once", retries=1)(flaky.fn)(1)
    assert len(calls) == 2
    with pytest.raises(RuntimeError, match="outside a flow"):
        where.submit()


def test_a_deployment_entrypoint_loads_the_prefect_flow():
    """`forgeplay serve` deploys `Flow.prefect()`; the entrypoint Prefect derives from it
    (`<file>:<name>.prefect_flow`) loads a Prefect flow again in another process (Prefect's
    loader puts the file's folder first on sys.path, so it runs in a process of its own)."""
    from flows.validate import validate_flow

    entry = f"flows/validate.py:{validate_flow.prefect().fn.__qualname__}"
    assert entry == "flows/validate.py:validate_flow.prefect_flow"
    code = ("import sys; from prefect.flows import Flow, load_flow_from_entrypoint; "
            "f = load_flow_from_entrypoint(sys.argv[1]); print(isinstance(f, Flow), f.name)")
    p = subprocess.run([sys.executable, "-c", code, entry], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.stdout.split() == ["True", "validate"], p.stderr[-2000:]

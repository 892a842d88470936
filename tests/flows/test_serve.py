"""`forgeplay serve` against a real Prefect server on 127.0.0.1 (started here): a validate
schedule on a short interval runs, its table artifact read back through the Prefect client
holds what the flow committed, its logs reach the server, and SIGTERM stops the serve
process cleanly and pauses the schedule. Plus the one-line errors of malformed files (no
server needed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.schedules import ScheduleError, parse
from generators.llm.vllm_server import free_port
from storage import load_table, write_rows
from storage.schema import SHARED_COLUMNS

BIN = Path(sys.executable).parent
QUICK = {  # the server schedules new deployments within a second, the runner polls every second
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "1",
    "PREFECT_SERVER_SERVICES_SCHEDULER_RECENT_DEPLOYMENTS_LOOP_SECONDS": "1",
    "PREFECT_RUNNER_POLL_FREQUENCY": "1",
}


def tail(path: Path, n: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    """(API URL, environment for processes that talk to it) of `prefect server start`."""
    home = tmp_path_factory.mktemp("prefect-server")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(QUICK, PREFECT_HOME=str(home))
    log = home / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, f"prefect server exited:\n{tail(log)}"
            assert time.monotonic() < deadline, f"prefect server did not answer in time:\n{tail(log)}"
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        yield url, {**env, "PREFECT_API_URL": url}
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log.read_text(errors="replace"), tail(log)


def triples_dataset(root: Path) -> int:
    """A small world's triples plus one whose answer is in its question and one exact copy (two rejects);
    returns the number of triples."""
    from generators.corpus.build import WorldConfig, write

    write(WorldConfig(seed=3, entities=50), root, "w")
    rows = [{k: v for k, v in r.items() if k not in SHARED_COLUMNS} for r in load_table("w", "triples", root).to_pylist()]
    leaks = dict(rows[0], triple_id="tri-leaks", answer=rows[0]["question"].split()[1])
    copy = dict(rows[1], triple_id="tri-copy")
    write_rows(root, "w", "triples", "extra", [leaks, copy])
    return len(rows) + 2


def client(url: str):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: url}):
        return get_client(sync_client=True)


def wait_for_completed_run(c, deployment_id, proc, log: Path, timeout: float = 240):
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.client.schemas.sorting import FlowRunSort

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"forgeplay serve exited with {proc.returncode}:\n{tail(log)}"
        runs = c.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
                                sort=FlowRunSort.EXPECTED_START_TIME_ASC)
        done = [r for r in runs if r.state and r.state.is_completed()]
        failed = [r for r in runs if r.state and (r.state.is_failed() or r.state.is_crashed())]
        assert not failed, f"{failed[0].name}: {failed[0].state.message}\n{tail(log)}"
        if done:
            return done[0]
        time.sleep(1)
    raise AssertionError(f"no run of the deployment completed in {timeout} s:\n{tail(log)}")


def table_artifact(c, key: str, flow_run_id) -> list[dict]:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    arts = c.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key]),
                                                           flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    assert len(arts) == 1 and arts[0].type == "table", arts
    return json.loads(arts[0].data)


def log_lines(c, flow_run_id) -> list[str]:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    return [line.message for line in c.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))]


def test_a_scheduled_run_completes_and_publishes_its_table(prefect_server, tmp_path):
    url, env = prefect_server
    root = tmp_path / "data"
    n = triples_dataset(root)
    config = tmp_path / "schedules.yaml"
    config.write_text("schedules:\n"
                      "  - flow: validate\n    name: every-3s\n    interval: 3\n"
                      "    parameters: {dataset: w, kind: triples, layers: 'schema,rules,dedup'}\n")
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(BIN / "forgeplay"), "serve", "--config", str(config), "--data-root", str(root)],
                                env={**env, "PREFECT_HOME": str(tmp_path / "prefect")}, cwd=tmp_path,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        with client(url) as c:
            deadline = time.monotonic() + 120
            while True:  # the deployment exists once serve has registered it
                try:
                    deployment = c.read_deployment_by_name("validate/every-3s")
                    break
                except Exception:
                    assert proc.poll() is None and time.monotonic() < deadline, tail(log)
                    time.sleep(0.5)
            assert deployment.parameters["data_root"] == str(root.absolute())
            run = wait_for_completed_run(c, deployment.id, proc, log)
            rows = table_artifact(c, "validate-report-table", run.id)

            stages = {r["name"]: r for r in rows if r["section"] == "stage"}
            accepted = load_table("w_valid", "triples", root).num_rows
            assert stages["schema"]["rows_in"] == n
            assert stages["dedup"]["rows_out"] == accepted == n - 2
            verdicts = load_table("w", "verdicts", root).to_pylist()
            rejects = Counter(f"{v['layer']}/{v['reason']}" for v in verdicts if not v["passed"])
            assert {r["name"]: r["count"] for r in rows if r["section"] == "rejects by layer/reason"} == rejects
            assert sum(rejects.values()) == 2
            deadline = time.monotonic() + 30  # the run's logs reach the server in batches
            while not any("Finished in state Completed" in line for line in log_lines(c, run.id)):
                assert time.monotonic() < deadline, log_lines(c, run.id)
                time.sleep(0.5)

            proc.send_signal(signal.SIGTERM)
            # a run of the 3 s schedule may be in flight: stopping cancels it, and Prefect's
            # runner gives its process a grace period before it kills it (30 s)
            assert proc.wait(120) == 0, tail(log)
            assert c.read_deployment(deployment.id).paused  # stopping paused the schedule
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = log.read_text(errors="replace")
    assert "Traceback" not in out and "never awaited" not in out, out


BAD = [  # (file content, the error line after "schedules.yaml: ")
    ("", "(top level): the file is empty; it needs a `schedules` list"),
    ("schedules: []", "schedules: [] should be non-empty"),
    ("schedules:\n  - {flow: validate, name: a, cron: '0 2 * * *'}\n  - {flow: nope, name: b, interval: 5}",
     "schedules[1].flow: 'nope' is not one of"),
    ("schedules:\n  - {flow: validate, cron: '0 2 * * *'}", "schedules[0].name: missing (required)"),
    ("schedules:\n  - {flow: validate, name: a, cron: '61 * * * *'}",
     'schedules[0].cron: Invalid cron string: "61 * * * *"'),
    ("schedules:\n  - {flow: validate, name: a, cron: '0 2 * * *', timezone: Mars/Base}",
     'schedules[0].timezone: Invalid timezone: "Mars/Base"'),
    ("schedules:\n  - {flow: validate, name: a}", "schedules[0]: give cron (a cron string) or interval (seconds)"),
    ("schedules:\n  - {flow: validate, name: a, cron: '0 2 * * *', interval: 5}",
     "schedules[0].interval: give cron or interval, not both"),
    ("schedules:\n  - {flow: validate, name: a, interval: 0}", "schedules[0].interval: 0 is less than or equal"),
    ("schedules:\n  - {flow: validate, name: a, interval: 5, every: 3}", "schedules[0].every: unknown field"),
    ("schedules:\n  - {flow: synthesize, name: a, interval: 5, parameters: {n: many}}",
     "schedules[0].parameters.n: 'many' is not of type 'integer'"),
    ("schedules:\n  - {flow: synthesize, name: a, interval: 5, parameters: {layers: rules}}",
     "schedules[0].parameters.layers: not a parameter of synthesize"),
    ("schedules:\n  - {flow: validate, name: a, interval: 5, parameters: {layers: 'rules,magic'}}",
     "schedules[0].parameters: unknown layer(s) ['magic']"),
    ("schedules:\n  - {flow: validate, name: a, interval: 5}\n  - {flow: validate, name: a, cron: '0 2 * * *'}",
     "schedules[1].name: 'a' is already the name of schedules[0]"),
    ("schedules:\n  - flow: validate\n   name: a", "line 3: not YAML"),
]


@pytest.mark.parametrize("text,error", BAD, ids=[e.split(":")[0] for _, e in BAD])
def test_a_malformed_file_is_one_line_naming_the_field(tmp_path, text, error):
    from flows.schedules import load

    path = tmp_path / "schedules.yaml"
    path.write_text(text)
    with pytest.raises(ScheduleError) as e:
        load(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: {error}") and "\n" not in msg, msg


def test_serve_prints_the_error_and_exits_2_before_any_server_is_needed(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFECT_LOGGING_LEVEL", os.environ.get("PREFECT_LOGGING_LEVEL", "WARNING"))  # serve sets it
    path = tmp_path / "schedules.yaml"
    path.write_text("schedules:\n  - {flow: selfplay, name: a, interval: 60, parameters: {iterations: two}}\n")
    result = CliRunner().invoke(app, ["serve", "--config", str(path)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "schedules[0].parameters.iterations: 'two' is not of type 'integer'" in lines[0], lines


def test_a_good_file_gives_each_flow_its_configs_with_the_command_defaults():
    s = parse({"schedules": [{"flow": "synthesize", "name": "s", "cron": "0 * * * *",
                              "parameters": {"dataset": "d", "n": 4, "backend": "openai"}},
                             {"flow": "pipeline", "name": "p", "interval": 3600}]})
    synth, backend = s[0].configs
    assert (synth.dataset, synth.n, backend.backend) == ("d", 4, "openai")
    params = s[1].parameters(Path("/data"))
    assert params["data_root"] == "/data" and params["config"]["dataset"] == "demo" and "backend" in params

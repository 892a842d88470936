"""Synthesis and validation searching through a real `forgeplay serve-retriever` on 127.0.0.1:
trajectories replay through it, a changed index is `retriever_changed` and an edited record
`replay_mismatch`, and a server that goes away mid-run fails the stage with one line, after
which a rerun against the server started again resumes where the run stopped."""

import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.synthesize import run as synthesize
from flows.validate import run as validate
from generators.corpus.build import WorldConfig, write
from generators.llm.registry import BackendConfig
from generators.synth.synthesize import SynthConfig
from generators.tools.remote import RemoteRetriever
from storage import load_table, write_rows
from storage.reader import entries
from tests.generators.test_retrievers import serve
from validators.validator import ValidateConfig


def replay_codes(root, dataset: str) -> Counter:
    v = load_table(dataset, "verdicts", root).to_pylist()
    return Counter(r["reason"] for r in v if r["check"] == "replay")


@pytest.fixture
def world(tmp_path):
    root = tmp_path / "data"
    write(WorldConfig(seed=3, entities=150), root, "w")
    return root


def test_synthesis_and_validation_replay_through_the_server_and_tell_a_changed_index(world):
    proc, url = serve(world)
    try:
        summary = synthesize(SynthConfig(dataset="w", n=12, texts="template", retriever=url), BackendConfig(),
                             world, progress=False)
        assert summary["written"] == 12
        rows = load_table("w", "trajectories", world).to_pylist()
        metas = [json.loads(r["meta"]) for r in rows]
        assert all(m["retriever"]["retriever"] == url and m["retriever"]["fingerprint"] for m in metas)
        for r, m in zip(rows, metas):  # each call that searched recorded a hash of what the server found
            found = {x["tool_call_id"]: '"results"' in x["content"] for x in r["messages"] if x["role"] == "tool"}
            assert all(("retrieved" in k) == found[c] for c, k in m["calls"].items())
        validate(ValidateConfig(dataset="w", retriever=url), data_root=world, progress=False)
        codes = replay_codes(world, "w")
        assert sum(codes.values()) == 12 and set(codes) <= {"ok"}, codes
        # a record whose tool message was edited is still a tampered record
        row = dict(rows[0])
        msgs = [dict(m) for m in row["messages"]]
        tool = next(i for i, m in enumerate(msgs) if m["role"] == "tool")
        msgs[tool]["content"] = msgs[tool]["content"].replace('"snippet": "', '"snippet": "Edited. ', 1)
        row.update(messages=msgs, traj_id="edited")
        write_rows(world, "edited", "trajectories", "e", [{k: v for k, v in row.items()
                                                           if k not in ("id", "run_id", "created_at", "lineage",
                                                                        "schema_version")}])
        validate(ValidateConfig(dataset="edited", corpus="w", retriever=url), data_root=world, progress=False)
        assert replay_codes(world, "edited") == Counter({"replay_mismatch": 1})
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # the same documents, every other page's text gone from the index: the server answers otherwise
    docs = load_table("w", "documents", world).to_pylist()
    write_rows(world, "w_changed", "documents", "c", [
        {k: (v if k != "text" or i % 2 else "") for k, v in d.items()
         if k not in ("id", "run_id", "created_at", "lineage", "schema_version")} for i, d in enumerate(docs)])
    proc, changed = serve(world, "w_changed")
    try:
        validate(ValidateConfig(dataset="w", out="w_again", retriever=changed, run_id="again"), data_root=world,
                 progress=False)
        v = [r for r in load_table("w", "verdicts", world, run_id="again").to_pylist() if r["check"] == "replay"]
        codes = Counter(r["reason"] for r in v)
        assert codes["retriever_changed"] > 0 and codes["replay_mismatch"] == 0, codes
        assert all("index changed" in r["detail"] for r in v if r["reason"] == "retriever_changed")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_server_gone_mid_run_fails_the_stage_in_one_line_and_a_rerun_resumes(world, monkeypatch):
    proc, url = serve(world)
    port = url.split(":")[2].split("/")[0]
    runner = CliRunner()
    try:
        synth = ["--data-root", str(world), "synthesize", "--dataset", "w", "--n", "24", "--texts", "template",
                 "--retriever", url]
        assert runner.invoke(app, synth).exit_code == 0
        asked = RemoteRetriever.score_many

        def then_gone(self, queries):  # the server dies once a chunk's verdicts are committed
            if proc.poll() is None and entries(world, "w", "verdicts"):
                proc.kill()
                proc.wait()
            return asked(self, queries)

        monkeypatch.setattr(RemoteRetriever, "score_many", then_gone)
        check = ["--data-root", str(world), "validate", "--dataset", "w", "--chunk", "4", "--retriever", url]
        res = runner.invoke(app, check)
        assert res.exit_code == 2, res.output
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert lines[-1].startswith("validate failed: retriever http://127.0.0.1:") and "did not answer" in lines[-1]
        first = load_table("w", "verdicts", world).to_pylist()
        assert 0 < len({r["record_id"] for r in first}) < 24  # the first chunks are committed, not the rest
        monkeypatch.setattr(RemoteRetriever, "score_many", asked)
        proc, again = serve(world, port=int(port))  # the same server, back on its port
        assert again == url
        res = runner.invoke(app, check)
        assert res.exit_code == 0, res.output
        verdicts = load_table("w", "verdicts", world).to_pylist()
        replays = Counter(r["record_id"] for r in verdicts if r["check"] == "replay")
        assert len(replays) == 24 and set(replays.values()) == {1}  # every record once, none twice
        assert replay_codes(world, "w") == Counter({"ok": 24})
        assert load_table("w_valid", "trajectories", world).num_rows == 24
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)

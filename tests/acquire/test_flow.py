"""The `acquire-labels` flow end to end on a real world corpus with a tiny random Llama as the
policy: every strategy writes consistent shards (rollouts, bought and pseudo labels) and a
ledger that agrees with them, never spends past the budget, and a rerun buys nothing twice."""

import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from acquire.ledger import Ledger
from acquire.report import label_report
from acquire.session import AcquireConfig
from acquire.strategies import STRATEGIES
from generators.corpus.build import WorldConfig, write
from storage import load_table
from storage.manifest import dataset_dir
from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("acquire")
    write(WorldConfig(seed=3, entities=120), root, "w")
    return root


def _cfg(model, strategy: str, **kw) -> AcquireConfig:
    kw = {"limit": 8, "budget": 3, "out": f"w_{strategy}", **kw}
    return AcquireConfig(dataset="w", strategy=strategy, model=str(model), n=4, batch=4, label_p=0.5,
                         max_turns=2, max_new_tokens=12, label_warmup=1, **kw)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_every_strategy_writes_consistent_shards_within_the_budget(root, tiny_llama_dir, strategy):  # noqa: F811
    from flows.acquire import run_acquire

    s = run_acquire(_cfg(tiny_llama_dir, strategy), root, progress=False)
    out = f"w_{strategy}"
    rollouts = load_table(out, "rollouts", root).to_pylist()
    labels = load_table(out, "labels", root).to_pylist()
    bought = [r for r in labels if r["source"] == "column"]
    pseudo = [r for r in labels if r["source"] == "pseudo"]
    prompts = {r["prompt_id"] for r in rollouts}
    assert len(prompts) == 8 and Counter(r["prompt_id"] for r in rollouts) == Counter({p: 4 for p in prompts})
    assert Counter(r["prompt_id"] for r in pseudo) == Counter({p: 1 for p in prompts})
    assert len(bought) == 3 == s["ledger"]["labels"] and {r["prompt_id"] for r in bought} <= prompts
    truth = {t["triple_id"]: t["answer"] for t in load_table("w", "triples", root).to_pylist()}
    assert all(r["label"] == truth[r["prompt_id"]] and r["strategy"] == strategy for r in bought)
    ledger = Ledger(dataset_dir(root, out) / "_ledger.sqlite")
    assert ledger.paid() == {r["prompt_id"]: r["label"] for r in bought}
    assert [b["bought"] for b in s["batches"]] == [2, 1]  # half of each batch, then what the budget left
    for r in pseudo:  # the pseudo-label is the vote over the prompt's rollouts
        answers = [x["answer"] for x in rollouts if x["prompt_id"] == r["prompt_id"]]
        assert json.loads(r["meta"])["n"] == 4 and (r["label"] is None or r["label"] in answers)

    again = run_acquire(_cfg(tiny_llama_dir, strategy), root, progress=False)
    assert again["skipped_batches"] == 2 and again["batches"] == []
    raised = run_acquire(_cfg(tiny_llama_dir, strategy, limit=12, budget=5), root, progress=False)
    assert raised["skipped_batches"] == 2 and raised["ledger"]["labels"] == 5  # one more batch, two more labels
    bought = [r for r in load_table(out, "labels", root).to_pylist() if r["source"] == "column"]
    assert len(bought) == len({r["prompt_id"] for r in bought}) == 5
    report = label_report(root, out)
    assert report["strategies"][strategy]["bought"] == 5 and report["ledger"]["left"] == 0


def test_labels_report_command_and_its_error_without_a_ledger(root, tiny_llama_dir):  # noqa: F811
    from flows.cli import app

    res = CliRunner().invoke(app, ["labels", "report", "--dataset", "w_random", "--data-root", str(root)])
    assert res.exit_code == 0 and "corrected the vote" in res.output and "budget 5" in res.output, res.output
    res = CliRunner().invoke(app, ["labels", "report", "--dataset", "w", "--data-root", str(root)])
    assert res.exit_code == 2 and "no label ledger" in res.output
    res = CliRunner().invoke(app, ["acquire-labels", "--dataset", "w", "--source", "human"])
    assert res.exit_code == 2 and "--source must be one of column, queue, llm" in res.output, res.output
    res = CliRunner().invoke(app, ["acquire-labels", "--dataset", "w", "--source", "llm"])
    assert res.exit_code == 2 and "needs --annotator-url" in res.output, res.output


def test_a_served_policy_samples_and_the_signals_come_from_a_teacher_forced_pass(root, tiny_llama_dir):  # noqa: F811
    """`--rollout-backend openai --base-url`: the answers come from a real OpenAI-compatible server on
    127.0.0.1 (the project's own, over the tiny model), and CARE's probes read hidden states
    from a teacher-forced pass of --model in the flow's process."""
    import torch

    from flows.acquire import _probes_path, run_acquire
    from generators.llm.server import create_app
    from generators.llm.transformers_backend import TransformersBackend
    from tests.generators.servers import UvicornThread

    served = TransformersBackend(str(tiny_llama_dir), batch_size=16)
    with UvicornThread(create_app(served, model_name="policy", batch_wait=0.05, close_backend=True)) as srv:
        cfg = _cfg(tiny_llama_dir, "care", out="w_served", backend="openai", url=srv.url)
        s = run_acquire(cfg, root, progress=False)
        requests = sum(srv.server.config.app.state.batcher.batches)
    rollouts = load_table("w_served", "rollouts", root).to_pylist()
    assert len(rollouts) == 32 and requests >= 32  # every answer's turns went through the server
    assert [b["bought"] for b in s["batches"]] == [2, 1] and s["ledger"]["labels"] == 3
    probes = torch.load(_probes_path(root, cfg, s["run_id"]), weights_only=False)
    buffer = probes["buffer"]  # the probes learned from every bought label's hidden states
    assert len(buffer) == 3 and all(x.responses.shape == (4, 128) for x in buffer)
    res = CliRunner().invoke(__import__("flows.cli", fromlist=["app"]).app,
                             ["acquire-labels", "--dataset", "w", "--rollout-backend", "openai"])
    assert res.exit_code == 2 and "--rollout-backend openai needs --base-url" in res.output, res.output


def test_a_server_samples_the_next_batches_while_one_is_bought(root, tiny_llama_dir, monkeypatch):  # noqa: F811
    """With a server (`--rollout-backend openai`, the stand-in engine), the batches after the one
    being scored and bought are sampled meanwhile: more than one batch's answers are in flight
    at once, and the rows are exactly those of sampling batch by batch."""
    from functools import partialmethod

    from acquire.session import Session
    from flows.acquire import run_acquire
    from generators.llm.standin_engine import StandinEngine

    rows, peaks = {}, {}
    for ahead in (None, 1):
        if ahead:
            monkeypatch.setattr(Session, "rolled", partialmethod(Session.rolled, ahead=ahead))
        with StandinEngine(slots=256, latency=0.05) as engine:
            cfg = _cfg(tiny_llama_dir, "vote_entropy", out=f"w_ahead_{ahead}", backend="openai", url=engine.url,
                       served_model="standin", limit=24)
            s = run_acquire(cfg, root, progress=False)
            peaks[ahead] = engine.max_busy
        assert len(s["batches"]) == 6 and s["ledger"]["labels"] == 3
        rows[ahead] = sorted((r["prompt_id"], r["meta"], json.dumps(r["messages"]), r["answer"])
                             for r in load_table(cfg.labels_dataset(), "rollouts", root).to_pylist())
    assert len(rows[None]) == 96 and rows[None] == rows[1]
    assert peaks[1] <= 16 < peaks[None], peaks  # a batch is 4 prompts x 4 answers


def test_killed_mid_way_and_resumed_pays_no_answer_twice(root, tiny_llama_dir, tmp_path):  # noqa: F811
    """kill -9 an acquisition against the stand-in engine while its answers arrive (several
    batches sampled at once); the rerun asks the engine nothing it had completed (the answers
    were journaled), writes an uninterrupted run's rows, and removes the journal at the end."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from flows.acquire import run_acquire
    from generators.llm.standin_engine import StandinEngine
    from storage.configcli import to_args
    from storage.journal import journal_path
    from tests.engine_kill import journal_lines, kill_once_journaled

    def rows(r):
        return sorted((x["prompt_id"], x["meta"], json.dumps(x["messages"]), x["answer"])
                      for x in load_table("w_kill", "rollouts", r).to_pylist())

    def committed(r) -> int:
        try:
            return load_table("w_kill", "rollouts", r, columns=["prompt_id"]).num_rows
        except Exception:  # nothing committed yet
            return 0

    roots = {}
    for name in ("clean", "killed"):
        roots[name] = tmp_path / name
        shutil.copytree(dataset_dir(root, "w"), dataset_dir(roots[name], "w"))
    with StandinEngine(slots=4, latency=0.3) as engine:
        cfg = _cfg(tiny_llama_dir, "vote_entropy", out="w_kill", backend="openai", url=engine.url,
                   served_model="standin", limit=24)
        clean = run_acquire(cfg, roots["clean"], progress=False)
        engine.reset_counts()
        journal = journal_path(roots["killed"], "w_kill", clean["run_id"])
        repo = Path(__file__).resolve().parents[2]
        proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "--data-root", str(roots["killed"]),
                                 "acquire-labels", *to_args(cfg)], cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        kill_once_journaled(proc, engine, journal, lambda: engine.completed >= 30, "30 answers")
        paid_before = engine.completed
        assert committed(roots["killed"]) < 96 and journal_lines(journal) >= 30
        resumed = run_acquire(cfg, roots["killed"], progress=False)
        assert engine.repaid == 0 and engine.twice_completed() == 0  # no completed answer asked again
        assert engine.completed > paid_before  # the rest was asked for after the resume
    assert resumed["run_id"] == clean["run_id"]
    assert rows(roots["killed"]) == rows(roots["clean"]) and len(rows(roots["clean"])) == 96
    assert resumed["ledger"]["labels"] == clean["ledger"]["labels"] == 3
    assert not journal.exists()

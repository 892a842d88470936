"""The validate flow end to end (verdicts, accepted shards, funnel, kill + rerun without
duplicates, user file input, CLI), and the judge/answerability layers with real models
through the backend protocol (tiny random Llama; the embedded model in the slow test)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import flows.validate as fv
from generators.llm.registry import BackendConfig, make_backend
from storage import Catalog, load_table, resumable
from storage.funnel import funnel_sql
from validators.validator import ValidateConfig, Validator

REPO = Path(__file__).resolve().parents[2]


def test_flow_kill_rerun_input_file_and_funnel(world, tmp_path, monkeypatch):
    root, rows, _, _ = world
    cfg = ValidateConfig(dataset="w", chunk=15, run_id="v1")
    real = resumable.ShardWriter
    state = {"n": 0}

    class Dying(real):  # the process "dies" after the 2nd chunk's accepted commit, before its verdicts
        def close(self):
            if self.kind == "verdicts":
                state["n"] += 1
                if state["n"] == 2:
                    raise KeyboardInterrupt("killed")
            return super().close()

    monkeypatch.setattr(resumable, "ShardWriter", Dying)
    with pytest.raises(KeyboardInterrupt):
        fv.run(cfg, data_root=root, progress=False)
    monkeypatch.setattr(resumable, "ShardWriter", real)
    s = fv.run(cfg, data_root=root, progress=False)
    assert s["skipped_committed"] == 15 and s["rows_in"] == 40
    ver = load_table("w", "verdicts", root, run_id="v1").to_pylist()
    acc = load_table("w_valid", "trajectories", root, run_id="v1").column("id").to_pylist()
    assert len(acc) == len(set(acc)) == s["rows_out"]
    assert len({r["record_id"] for r in ver}) == 40
    keys = [(r["record_id"], r["layer"], r["check"]) for r in ver]
    assert len(keys) == len(set(keys))
    assert set(acc) == {r["id"] for r in rows} - {r["record_id"] for r in ver if not r["passed"]}
    assert 30 <= len(acc) <= 40  # clean synthesized data mostly survives (dedup may drop repeats)
    with Catalog(root) as cat:
        funnel = cat.rows(funnel_sql("w"))
        assert {f[0] for f in funnel} == {"schema", "rules", "dataset"}
        assert sorted(cat.rows("SELECT * FROM w_funnel")) == sorted(funnel)  # the catalog's view
        assert cat.scalar("SELECT count(*) FROM w_verdicts WHERE layer='rules' AND \"check\"='answer' AND passed") == 40

    # a user file: one good record, one corrupted, one with an invented rationale, one non-JSON line
    bad = dict(rows[0], answer="definitely wrong")
    final = dict(rows[2]["messages"][-1], content="<think>The story is set in the 1920s, so that is it.</think>"
                                                  f"<answer>{rows[2]['answer']}</answer>")
    invented = dict(rows[2], messages=rows[2]["messages"][:-1] + [final])
    f = tmp_path / "in.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in (rows[1], bad, invented)) + "\nnot json at all\n")
    out = fv.run(ValidateConfig(input=str(f), out="theirs"), data_root=root, progress=False)
    reasons = {r["reason"] for r in load_table("theirs", "verdicts", root).to_pylist() if not r["passed"]}
    assert reasons == {"wrong_answer", "not_an_object", "think_unsupported_number"} and out["rows_out"] == 1
    ok_rules = [r for r in load_table("theirs", "verdicts", root).to_pylist() if r["check"] == "replay"]
    assert ok_rules and ok_rules[0]["reason"] == "replay_skipped_no_corpus"


def test_a_failed_commit_is_retried_and_no_later_chunk_commits_before_it(world, tmp_path, monkeypatch):
    """One worker: the commits run on a writer thread behind the checks. A commit that fails
    once is retried (the run completes, nothing twice); one that fails for good stops the
    chunks queued behind it, so what is committed is the run's first chunks."""
    root, rows, _, _ = world
    real = resumable.ShardWriter
    fails = {"left": 0, "seen": 0}

    class Flaky(real):
        def close(self):
            if self.kind == "verdicts":
                fails["seen"] += 1
                if fails["seen"] >= 2 and fails["left"]:
                    fails["left"] -= 1
                    raise OSError("disk hiccup")
            return super().close()

    monkeypatch.setattr(resumable, "ShardWriter", Flaky)
    fails.update(left=1, seen=0)
    s = fv.run(ValidateConfig(dataset="w", chunk=10, run_id="flaky"), data_root=root, progress=False)
    ver = load_table("w", "verdicts", root, run_id="flaky").to_pylist()
    keys = [(r["record_id"], r["layer"], r["check"]) for r in ver]
    assert len({r["record_id"] for r in ver}) == 40 and len(keys) == len(set(keys)) and s["skipped_committed"] == 0

    fails.update(left=99, seen=0)
    with pytest.raises(OSError, match="disk hiccup"):
        fv.run(ValidateConfig(dataset="w", chunk=10, run_id="broken"), data_root=root, progress=False)
    committed = {r["record_id"] for r in load_table("w", "verdicts", root, run_id="broken").to_pylist()}
    assert committed == {r["id"] for r in rows[:10]}  # chunk 1 only: chunks 3 and 4 refused after chunk 2 failed


class Scripted:
    """Stands in for the judge model: scores by a rule on the prompt."""

    name, model = "scripted", "scripted-judge"

    def generate(self, requests, progress=False):
        from generators.llm.base import Completion

        return [[Completion(text="SCORE: 2 bad" if "Quentin" in r.messages[0]["content"] else "SCORE: 9 fine")]
                for r in requests]

    def close(self):
        pass


def test_judge_and_answerability_layers(world, tiny_llama_dir):
    _, rows, docs, _ = world
    import copy

    bad = copy.deepcopy(rows[0])
    bad["messages"][-1]["content"] = "<think>x</think><answer>Quentin</answer>"
    v = Validator(ValidateConfig(layers="judge"), "trajectories", backend=Scripted())
    out, acc = v.process([("a", rows[0]), ("b", bad)])
    by = {r["record_id"]: r for r in out}
    assert by["a"]["passed"] and by["b"]["reason"] == "judge_low_score"
    assert json.loads(by["b"]["detail"])["model"] == "scripted-judge" and [a["id"] for a in acc] == ["a"]

    be = make_backend(BackendConfig(model=str(tiny_llama_dir)))
    documents = {d["doc_id"]: (d["title"], d["text"]) for d in docs}
    v = Validator(ValidateConfig(layers="judge,answerability", all_layers=True, judge_max_tokens=6),
                  "trajectories", backend=be, documents=documents)
    out, _ = v.process([(r["id"], r) for r in rows[:2]])
    assert {(r["layer"], r["record_id"]) for r in out} == {(l, r["id"]) for l in ("judge", "answerability") for r in rows[:2]}
    assert be.usage.requests > 0 and be.usage.completion_tokens > 0
    assert all(r["reason"] in ("judge_unparseable", "judge_low_score", "ok", "not_answerable_with_context",
                               "answerable_without_context") for r in out)


def test_cli_validate_prints_funnel_and_rejects_bad_layer(world, tmp_path):
    root, _, _, _ = world
    env = {**os.environ, "FORGEPLAY_DATA": str(root)}
    bad = subprocess.run([sys.executable, "-c", "from flows.cli import app; from flows import cli_validate; "
                          "cli_validate.register(app); app()", "validate", "--dataset", "w", "--layers", "nope"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "unknown layer" in bad.stderr


@pytest.mark.slow
def test_answerability_with_the_embedded_model(world, embedded_dir):
    _, rows, docs, _ = world
    be = make_backend(BackendConfig(model=str(embedded_dir)))
    documents = {d["doc_id"]: (d["title"], d["text"]) for d in docs}
    v = Validator(ValidateConfig(layers="judge,answerability", all_layers=True, judge_sample=1), "trajectories",
                  backend=be, documents=documents)  # the judge reads one record (the model's slowest part here)
    out, _ = v.process([(r["id"], r) for r in rows[:3]])
    assert len([r for r in out if r["layer"] == "answerability"]) == 3
    assert len([r for r in out if r["layer"] == "judge"]) == 1
    assert all(json.loads(r["detail"])["model"] for r in out)
    assert be.usage.completion_tokens > 0

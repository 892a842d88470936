"""`forgeplay show DATASET ID` on data the project's own flows wrote: a world, template-written
trajectories (synthesize), one of them edited to a wrong answer, validation (verdicts beside
the records, the accepted ones in `w_valid`). An accepted trajectory prints its conversation
turn by turn, every check it passed and its lineage; the edited one says where it was
rejected and why; `--format json` is one JSON document; tasks and labels print as their own
kind; a missing dataset or id is one line and exit code 2."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from flows.cli import app
from storage import load_table, write_rows
from storage.samples import SAMPLES


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    from flows.synthesize import run as synthesize
    from flows.validate import run as validate
    from generators.corpus.build import WorldConfig, write
    from generators.llm.registry import BackendConfig
    from generators.synth.synthesize import SynthConfig
    from validators.validator import ValidateConfig

    root = tmp_path_factory.mktemp("show")
    write(WorldConfig(seed=3, entities=150), root, "w")
    synthesize(SynthConfig(dataset="w", n=4, texts="template"), BackendConfig(), root, progress=False)
    row = load_table("w", "trajectories", root).to_pylist()[0]
    last = row["messages"][-1]
    wrong = {k: v for k, v in row.items() if k not in ("id", "run_id", "created_at", "schema_version", "lineage")}
    wrong.update(traj_id="edited", answer="Nowhere",
                 messages=row["messages"][:-1] + [{**last, "content": "<think>A guess.</think><answer>Nowhere</answer>"}])
    write_rows(root, "w", "trajectories", "edited", [wrong])
    validate(ValidateConfig(dataset="w"), data_root=root, progress=False)
    write_rows(root, "w_selfplay", "tasks", "sp", [SAMPLES["tasks"]])
    write_rows(root, "w_labels", "labels", "lb", [SAMPLES["labels"], {**SAMPLES["labels"], "label": None,
                                                                     "strategy": "pseudo", "cost": 0.0}])
    return root


def show(root, *args) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["--data-root", str(root), "show", *args], env={"COLUMNS": "200"})
    return res.exit_code, res.output


def test_an_accepted_trajectory_reads_turn_by_turn_with_verdicts_and_lineage(root):
    row = load_table("w_valid", "trajectories", root).to_pylist()[0]
    code, out = show(root, "w_valid", row["traj_id"])
    assert code == 0, out
    assert out.startswith(f"trajectory {row['id']} in w_valid\n")
    assert f"question: {row['question']}" in out and f"case: {row['case']}" in out
    roles = re.findall(r"^--- \d+\. (\w+)", out, re.M)
    assert roles == [m["role"] for m in row["messages"]]  # every turn, in order
    calls = [c for m in row["messages"] for c in m["tool_calls"] or []]
    for c in calls:  # each call with its arguments, each result under the call it answers
        args = ", ".join(f"{k}={json.dumps(v)}" for k, v in json.loads(c["arguments"]).items())
        assert f"-> call {c['name']}({args})  id {c['id']}" in out
        assert f"(answers {c['id']})" in out
    after_system = out.split("--- 2. user")[1]  # the calls are lines of their own, not the model's markup
    assert "<tool_call>" not in after_system and "tools, listed above (--full prints them)" in out
    assert re.search(r"^verdicts \(w\): accepted by \d+ checks$", out, re.M)
    assert re.search(r"^  rules +replay +pass", out, re.M)
    assert f"run: {row['run_id']}" in out and f"parents: {row['lineage']['parent_ids'][0]}" in out
    full = show(root, "w_valid", row["traj_id"], "--full")[1]
    assert "<tool_call>" in full.split("--- 2. user")[1] and "meta: {" in full
    assert all(f'"name": "{t["name"]}"' in full for t in row["tools"])  # every offered tool's schema


def test_a_rejected_trajectory_says_where_and_why(root):
    code, out = show(root, "w", "edited", "--kind", "trajectories")
    assert code == 0, out
    assert "answer:   Nowhere" in out and "<answer>Nowhere</answer>" in out
    verdicts = load_table("w", "verdicts", root).to_pylist()
    edited = load_table("w", "trajectories", root, run_id="edited").to_pylist()[0]
    failed = [v for v in verdicts if v["record_id"] == edited["id"] and not v["passed"]]
    assert failed, "the edited answer should fail a check"
    assert f"verdicts (w): rejected at {failed[0]['layer']} ({failed[0]['reason']})" in out
    assert f"REJECT {failed[0]['reason']}" in out
    assert "run: edited" in out


def test_json_is_one_document_with_the_record_verdicts_and_run_record(root):
    row = load_table("w", "trajectories", root).to_pylist()[0]
    code, out = show(root, "w", row["id"], "--format", "json")
    assert code == 0, out
    doc = json.loads(out)  # one document, not JSON Lines
    assert doc["kind"] == "trajectories" and doc["record"]["traj_id"] == row["traj_id"]
    assert doc["record"]["messages"] == row["messages"]
    assert {v["layer"] for v in doc["verdicts"]} >= {"schema", "rules"} and all(v["passed"] for v in doc["verdicts"])
    assert doc["run_record"].endswith(f"w/_runs/{row['run_id']}.json")


def test_tasks_and_labels_print_as_their_kind(root):
    code, out = show(root, "w_selfplay", "k1")
    assert code == 0 and out.startswith("task ") and "hop 1: 'Ada Quell' -> d1  (birthplace)" in out
    assert "Ada Quell was born in Velmora." in out and "verdicts: none (not validated)" in out
    code, out = show(root, "w_labels", "t1")  # a prompt with a bought and a pseudo label
    assert code == 0 and out.startswith("label ") and "(2 rows carry this id" in out
    assert json.loads(show(root, "w_labels", "t1", "-f", "json")[1])["matches"] == 2


@pytest.mark.parametrize("args,error", [
    (["nope", "x"], "no dataset 'nope' under"),
    (["w", "no-such-id"], "no record 'no-such-id' in dataset 'w' (searched documents, triples, tools, trajectories"),
    (["w", "x", "--kind", "rollouts"], "dataset 'w' has no rollouts rows; it has: documents, triples"),
])
def test_a_missing_dataset_kind_or_id_is_one_line(root, args, error):
    code, out = show(root, *args)
    lines = [line for line in out.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and error in lines[0], out

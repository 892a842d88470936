"""One self-play iteration's data: examiner outputs become tasks or rejects with reasons,
student attempts point to their tasks and are scored; the `selfplay` flow commits every
phase once, and a run SIGKILLed mid-iteration resumes to the rows an uninterrupted run
makes. Real world corpus, real BM25 simulator, a tiny random Llama as both roles."""

import contextlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from generators.corpus.build import WorldConfig, write
from generators.llm.transformers_backend import TransformersBackend
from generators.tools.base import base_rows
from generators.tools.simulator import Simulator
from selfplay.examiner import REJECTS
from selfplay.phases import demonstrated
from selfplay.play import PlayConfig, attempt, examined, run_id, score
from selfplay.warmstart import EXAMINER_TOOL, demonstrations
from storage import Catalog, load_table
from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401
from validators.question_rules import TaskRules

REPO = Path(__file__).resolve().parents[2]
CODES = set(REJECTS) | set(TaskRules().codes())


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("play")
    write(WorldConfig(seed=3, entities=200), root, "w")
    docs = load_table("w", "documents", root).to_pylist()
    return root, docs, load_table("w", "triples", root).to_pylist(), base_rows()


def test_a_demonstrated_conversation_is_a_task_and_a_garbled_one_a_reject(world):
    _, docs, triples, tools = world
    sim = Simulator(docs, seed=0, tools=tools)
    demo = demonstrations(docs, triples, sim, next(t for t in tools if t["name"] == EXAMINER_TOOL), n=1)[0][0]
    msgs, texts = demo["trajectory"]["messages"], {d["doc_id"]: (d["title"], d["text"]) for d in docs}
    seed_doc = next(d for d in docs if d["doc_id"] == demo["task"]["qcp"]["seed_doc_id"])
    cfg = PlayConfig(dataset="w")
    good = examined(msgs, seed_doc, demo["task"]["hop_count"], cfg, "r", 0, 0, texts)
    assert good["task"]["question"] == demo["task"]["question"] and good["verdicts"][0]["passed"]
    assert good["rollout"]["reward"] == 0.5 and json.loads(good["rollout"]["meta"])["task_id"] == good["task"]["task_id"]
    garbled = msgs[:-1] + [{"role": "assistant", "content": "<think>x</think><answer>1</answer><answer>2</answer>"}]
    bad = examined(garbled, seed_doc, 2, cfg, "r", 0, 1, texts)
    assert bad["task"] is None and bad["reason"] in ("no_question", "multiple_answers") and not bad["verdicts"][0]["passed"]
    assert bad["rollout"]["reward"] == 0.0 and bad["rollout"]["id"] != good["rollout"]["id"]


def test_attempts_point_to_their_tasks_and_score_counts_exact_matches(world, tiny_llama_dir):  # noqa: F811
    _, docs, triples, tools = world
    sim = Simulator(docs, seed=0, tools=tools)
    tasks = [d["task"] for d in demonstrations(docs, triples, sim, next(t for t in tools if t["name"] == EXAMINER_TOOL), n=3)[0]]
    cfg = PlayConfig(dataset="w", attempts=2, student_turns=2, max_new_tokens=8, batch_size=8)
    backend = TransformersBackend(str(tiny_llama_dir), batch_size=8)
    try:
        rows = attempt(backend, sim, tasks, tools, cfg, "r", 0)
    finally:
        backend.close()
    assert len(rows) == 2 * len(tasks) and len({r["id"] for r in rows}) == len(rows)
    assert {r["prompt_id"] for r in rows} == {t["task_id"] for t in tasks}
    assert all(json.loads(r["meta"])["role"] == "student" and r["messages"][1]["content"] in
               {t["question"] for t in tasks} for r in rows)
    # the scores count the attempts whose answer is the task's (two made right by hand)
    right = dict(rows[0], answer=tasks[0]["answer"]), dict(rows[1], answer=tasks[0]["answer"].upper())
    scored = {s["task_id"]: s for s in score(tasks, [*right, *rows[2:]], 2)}
    assert scored[tasks[0]["task_id"]]["k"] == 2 and scored[tasks[0]["task_id"]]["examiner_reward"] == 0.5
    # the student is prompted with the tools as its SFT data showed them (--tool-style)
    from generators.synth.assemble import system_prompt

    assert rows[0]["messages"][0]["content"] == system_prompt(tools, "full")
    backend = TransformersBackend(str(tiny_llama_dir), batch_size=8)
    try:
        compact = attempt(backend, sim, tasks[:1], tools, replace(cfg, tool_style="compact"), "r", 0)
    finally:
        backend.close()
    assert compact[0]["messages"][0]["content"] == system_prompt(tools, "compact") != system_prompt(tools, "full")
    with pytest.raises(ValueError, match="--tool-style must be full or compact"):
        replace(cfg, tool_style="short").check()


def _run(root, model, **kw) -> dict:
    from flows.selfplay import run_selfplay

    kw.setdefault("train", False)
    cfg = PlayConfig(dataset="w", examiner=str(model), student=str(model), tasks=3, attempts=2, examiner_turns=2,
                     student_turns=2, max_new_tokens=12, batch_size=8, **kw)
    return run_selfplay(cfg, root, progress=False)


def _rows(root) -> dict:
    return {k: sorted((r["id"], json.dumps(r.get("messages") or r.get("reason"), sort_keys=True))
                      for r in load_table("w_selfplay", k, root).to_pylist()) for k in ("rollouts", "verdicts")}


def test_flow_keeps_every_examiner_output_with_a_reason_and_resumes_after_sigkill(world, tiny_llama_dir, tmp_path):  # noqa: F811
    root = world[0]
    s = _run(root, tiny_llama_dir, iterations=2)
    assert [it["examiner_outputs"] for it in s["iterations"]] == [3, 3]
    with Catalog(root) as cat:
        assert cat.scalar("SELECT count(*) FROM w_selfplay_verdicts WHERE \"check\" = 'examiner'") == 6
        reasons = {r[0] for r in cat.rows("SELECT reason FROM w_selfplay_verdicts WHERE NOT passed")}
        joined = cat.scalar("SELECT count(*) FROM w_selfplay_verdicts v JOIN w_selfplay_rollouts r ON v.record_id = r.id")
    assert reasons and reasons <= CODES and joined == 6
    with pytest.raises(ValueError, match="--resume"):
        _run(root, tiny_llama_dir, iterations=2)
    before = _rows(root)
    again = _run(root, tiny_llama_dir, iterations=2, resume=True)
    assert again["skipped_phases"] == 4 and _rows(root) == before

    # a second data root: killed in iteration 1's examine phase, then resumed
    other = tmp_path / "killed"
    write(WorldConfig(seed=3, entities=200), other, "w")
    script = f"""
import os, signal, sys
sys.path.insert(0, {str(REPO)!r})
import flows.selfplay as fs
real = fs.examine_task.fn
def dying(*a, **k):
    if k.get("it", a[6] if len(a) > 6 else None) == 1:  # iteration 1
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*a, **k)
fs.examine_task.fn = dying
from tests.selfplay.test_play import _run
_run({str(other)!r}, {str(tiny_llama_dir)!r}, iterations=2)
"""
    log = tmp_path / "killed.log"
    with open(log, "w") as out:  # its own process group: the temporary Prefect server it started dies with it
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
        try:
            code = proc.wait(timeout=900)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    assert code == -9, log.read_text()[-2000:]
    resumed = _run(other, tiny_llama_dir, iterations=2, resume=True)
    assert resumed["skipped_phases"] == 2
    assert _rows(other) == _rows(root)  # the same rows as the uninterrupted run, none twice


def test_bare_selfplay_command_runs_the_iterations_and_keeps_its_subcommands():
    from typer.testing import CliRunner

    from flows.cli import app

    bare = CliRunner().invoke(app, ["selfplay", "--dataset", "w", "--iterations", "1"])
    run = CliRunner().invoke(app, ["selfplay", "run", "--dataset", "w", "--iterations", "1"])
    assert bare.exit_code == run.exit_code == 2 and "--checkpoints DIR is required" in bare.output, bare.output
    assert CliRunner().invoke(app, ["selfplay", "warmstart", "--help"]).exit_code == 0
    assert "warmstart" in CliRunner().invoke(app, ["selfplay"]).output  # no options: the help


def test_run_id_counts_folders_inside_the_data_root_by_their_relative_path(tmp_path):
    def cfg(root: Path, model: str = "sft") -> PlayConfig:
        return PlayConfig(dataset="w", examiner=str(root / "runs" / model), student=str(root / "runs" / model),
                          checkpoints=str(root / "runs" / "ck"))

    a, b = tmp_path / "a", tmp_path / "b"
    assert run_id(cfg(a), a) == run_id(cfg(b), b)  # the same run in a moved data root: the same rows
    assert run_id(cfg(a), a) != run_id(cfg(a, "grpo"), a)  # another model: another run
    assert run_id(cfg(a), a) != run_id(cfg(a), b)  # outside the root the full path counts


def test_demo_tasks_pose_iteration_0_from_demonstrations_and_the_student_attempts_them(world, tiny_llama_dir):  # noqa: F811
    """--demo-tasks: iteration 0's tasks are the world's demonstrations (each with its QCP,
    its examiner rollout marked replayed), the student attempts each; iteration 1 samples the
    examiner again."""
    root, docs, _, tools = world
    s = _run(root, tiny_llama_dir, iterations=2, demo_tasks=True, out="w_demo")
    it0, it1 = s["iterations"]
    assert it0["replayed"] and it0["examiner_outputs"] == it0["tasks"] == 3 and it0["attempts"] == 6
    assert "replayed" not in it1 and it1["examiner_outputs"] == 3  # the tiny examiner's own outputs
    with Catalog(root) as cat:
        tasks = cat.rows("SELECT task_id, hop_count, len(qcp.hops) FROM w_demo_tasks")
        attempts = cat.rows("SELECT prompt_id FROM w_demo_rollouts WHERE json_extract_string(meta, '$.role') = 'student'")
        replayed = cat.scalar("SELECT count(*) FROM w_demo_rollouts WHERE json_extract(meta, '$.replayed')")
    assert len(tasks) == 3 + it1["tasks"] and all(hops >= 2 and n >= 1 for _, hops, n in tasks)
    assert {p for (p,) in attempts} <= {t for t, _, _ in tasks} and len(attempts) == 6 + it1["attempts"]
    assert replayed == 3
    plain = PlayConfig(dataset="w", tasks=3)
    assert run_id(replace(plain, demo_tasks=True), root) != run_id(plain, root)
    with pytest.raises(ValueError, match="--demo-tasks: the triples of 'w' make no demonstration"):
        demonstrated(plain, docs, [], Simulator(docs, seed=0, tools=tools), tools)


def test_a_served_model_gets_every_batch_of_a_phase_at_once(world, tiny_llama_dir):  # noqa: F811
    """A concurrent backend (a server) is given all batches of a phase together: against the
    stand-in engine, 48 attempts in batches of 8 are in flight at once, and the rollouts equal
    those of the same client taking the batches one after another in lockstep."""
    from transformers import AutoTokenizer

    from generators.llm.openai_backend import OpenAIBackend
    from generators.llm.standin_engine import StandinEngine
    from selfplay.play import _rollouts
    from train.evaluate import ServedClient
    from train.grpo import make_prompts

    root, docs, triples, tools = world
    sim = Simulator(docs, seed=0, tools=tools)
    prompts = make_prompts(triples[:48], tools)  # (each conversation its own: lockstep asks each alone too)
    cfg = PlayConfig(dataset="w", batch_size=8)
    with StandinEngine(slots=64, latency=0.3) as engine:
        client = ServedClient(OpenAIBackend(engine.url, "standin"), AutoTokenizer.from_pretrained(str(tiny_llama_dir)),
                              tiny_llama_dir)
        try:
            together = _rollouts(client, sim, prompts, cfg, 2, 5, False)
            peak = engine.max_busy
            client.concurrent = False
            apart = _rollouts(client, sim, prompts, cfg, 2, 5, False)
        finally:
            client.close()
    assert len(together) == 48 and [r.messages for r in together] == [r.messages for r in apart]
    assert peak > 2 * cfg.batch_size, peak


def test_the_scripted_examiner_poses_tasks_the_parser_and_the_task_rules_accept(world):
    """The stand-in's examiner replies (generators/llm/scripted_examiner.py), answered by the
    simulator as a rollout answers them, make tasks that `parse_examiner` accepts with the
    documents given (answer in the last search's pages, one search per hop), for most start
    documents and hop counts; the others are rejects with a reason."""
    from generators.llm.scripted_examiner import scripted_examiner_text
    from generators.llm.toolcalls import parse_tool_calls, render_tools_block
    from selfplay.examiner import examiner_messages, parse_examiner
    from selfplay.warmstart import examiner_tool
    from train.sft import template_messages
    from validators.verdict import Reject

    root, docs, _, tools = world
    sim = Simulator(docs, seed=0, tools=tools)
    block = render_tools_block([examiner_tool(tools)])
    texts = {d["doc_id"]: (d["title"], d["text"]) for d in docs}
    accepted, reasons = [], []
    for j, doc in enumerate(docs[:40]):
        hops = 1 + j % 4
        messages = examiner_messages(doc, hops, block)
        for _ in range(6):
            reply = scripted_examiner_text(template_messages(messages))
            messages.append({"role": "assistant", "content": reply})
            calls = parse_tool_calls(reply).calls
            if not calls:
                break
            messages += [{"role": "tool", "content": sim.call(c["name"], c["arguments"])} for c in calls]
        try:
            accepted.append((hops, parse_examiner(messages, hops, f"t{j}", "w", seed_doc_id=doc["doc_id"], documents=texts)))
        except Reject as r:
            reasons.append(r.reason)
    assert len(accepted) >= 30, reasons
    assert all(row["hop_count"] == hops for hops, row in accepted)
    assert scripted_examiner_text([{"role": "user", "content": "Name a city."}]) is None

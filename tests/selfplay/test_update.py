"""The self-play updates: rewards and advantages of stored rollouts, the teacher's prompt, the
student stage's teacher as the EMA of the student's steps, and one whole trained iteration
of the `selfplay` flow. Real world corpus, simulator, Trainer and Prefect flow; a tiny random
Llama in both roles. A random model writes no valid task, so the iteration's examine phase
is replayed from examiner demonstrations plus garbled outputs (selfplay/phases.py) and the
flow resumes after it: the attempts, both updates and the teacher run for real."""

import json
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rich.console import Console

from flows.cli_selfplay import _iteration_table, _timing_table
from generators.corpus.build import WorldConfig, write
from generators.tools.base import base_rows
from generators.tools.simulator import Simulator
from selfplay.phases import replay_examine
from selfplay.qcp import QCP
from selfplay.play import PlayConfig, run_id
from selfplay.samples import examiner_samples, student_samples, teacher_prompt
from selfplay.warmstart import EXAMINER_TOOL, demonstrations
from storage import load_table
from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401

GARBLED = "<think>x</think><answer>1</answer><answer>2</answer>"


def _meta(**kw) -> str:
    return json.dumps(kw)


def _chat(text: str) -> list[dict]:
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": "q?"},
            {"role": "assistant", "content": text}]


def test_examiner_rewards_follow_k_and_advantages_are_normalised_per_target_hop_count(embedded_tokenizer_dir):  # noqa: F811
    tok = AutoTokenizer.from_pretrained(embedded_tokenizer_dir)
    tasks = [{"task_id": t, "hop_count": 2, "answer": "Paris", "aliases": []} for t in ("t1", "t2", "t3")]
    rollouts = [{"id": f"e{i}", "messages": _chat(f"<answer>{i}</answer>"), "meta": _meta(task_id=t, target_hops=h)}
                for i, (t, h) in enumerate([("t1", 2), ("t2", 2), (None, 2), ("t3", 3), (None, 3)])]
    # n = 4 attempts per task: t1 solved once (the best task), t2 by all (too easy), t3 by none
    answers = {"t1": ["Paris", "Rome", "x", None], "t2": ["paris"] * 4, "t3": ["no"] * 4}
    attempts = [{"id": f"{t}-{j}", "prompt_id": t, "answer": a} for t, xs in answers.items() for j, a in enumerate(xs)]
    samples, counts = examiner_samples(rollouts, tasks, attempts, tok)
    got = {s.rollout_id: s for s in samples}
    assert counts["kept"] == 5 and [got[f"e{i}"].reward for i in range(5)] == [1.5, 0.5, 0.0, 0.5, 0.0]
    two = torch.tensor([1.5, 0.5, 0.0])  # target 2 hops: e0, e1, e2 normalised together, 3 hops apart
    expect = ((two - two.mean()) / (two.std(unbiased=False) + 1e-6)).tolist()
    assert [got[f"e{i}"].advantage for i in range(3)] == pytest.approx(expect, abs=1e-5)
    assert got["e3"].advantage == pytest.approx(1.0, abs=1e-5) and got["e4"].advantage == pytest.approx(-1.0, abs=1e-5)
    assert all(sum(s.mask) and s.mask[0] == 0 for s in samples)


def test_student_samples_are_grouped_by_task_and_the_teacher_reads_the_qcp(embedded_tokenizer_dir):  # noqa: F811
    tok = AutoTokenizer.from_pretrained(embedded_tokenizer_dir)
    qcp = {"seed_doc_id": "d1", "hops": [{"query": "Velmora mayor", "doc_ids": ["d2"], "note": "",
                                          "passages": ["Its mayor is Ben Orr."]}]}
    task = {"task_id": "t1", "question": "Who is the mayor of Velmora?", "answer": "Ben Orr", "qcp": json.dumps(qcp)}
    attempts = [{"id": f"a{j}", "prompt_id": "t1", "messages": _chat(f"<answer>{a}</answer>"), "meta": _meta(em=e)}
                for j, (a, e) in enumerate([("Ben Orr", 1), ("Ann", 0), ("Bo", 0), ("Ben Orr", 1)])]
    samples, _ = student_samples(attempts, [task], tok)
    assert [s.reward for s in samples] == [1, 0, 0, 1]
    assert [s.advantage for s in samples] == pytest.approx([1, -1, -1, 1], abs=1e-5)
    prefix = tok.decode(teacher_prompt(tok, samples[0], "qcp"))
    assert "Its mayor is Ben Orr." in prefix and "Velmora mayor" in prefix and prefix.rstrip().endswith("assistant")
    assert "Its mayor" not in tok.decode(teacher_prompt(tok, samples[0], "none"))
    with pytest.raises(ValueError, match="not among the tasks"):
        student_samples([dict(attempts[0], prompt_id="t9")], [task], tok)


def test_replayed_conversations_are_never_policy_gradient_samples_of_the_examiner(embedded_tokenizer_dir):  # noqa: F811
    from selfplay.step import DemonstrationNLL, SampledPG, batch_of
    from train.objective import Policy

    tok = AutoTokenizer.from_pretrained(embedded_tokenizer_dir)
    tasks = [{"task_id": t, "hop_count": 2, "answer": "Paris", "aliases": []} for t in ("t1", "t2", "d1")]
    own = [{"id": f"e{i}", "messages": _chat(f"<answer>{i}</answer>"), "meta": _meta(task_id=t, target_hops=2)}
           for i, t in enumerate(["t1", "t2", None])]
    shown = [{"id": "r0", "messages": _chat("<answer>Paris</answer>"), "meta": _meta(task_id="d1", target_hops=2, replayed=True)},
             {"id": "r1", "messages": _chat(GARBLED), "meta": _meta(task_id=None, target_hops=2, replayed=True)}]
    answers = {"t1": ["Paris", "x"], "t2": ["paris"] * 2, "d1": ["Paris", "no"]}  # d1 would be the best task
    attempts = [{"id": f"{t}-{j}", "prompt_id": t, "answer": a} for t, xs in answers.items() for j, a in enumerate(xs)]
    alone, _ = examiner_samples(own, tasks, attempts, tok)
    samples, counts = examiner_samples(own + shown, tasks, attempts, tok, demos=True)
    policy = [s for s in samples if not s.demo]
    # the replayed rows change neither which rows the policy gradient sees nor their advantages
    assert [(s.rollout_id, s.advantage) for s in policy] == [(s.rollout_id, s.advantage) for s in alone]
    assert [(s.rollout_id, s.advantage, s.reward) for s in samples if s.demo] == [("r0", 0.0, 0.0)]
    assert counts["replayed"] == 2 and counts["demonstrations"] == 1
    assert [s.rollout_id for s in examiner_samples(own + shown, tasks, attempts, tok)[0]] == ["e0", "e1", "e2"]
    # even with an advantage forced onto it, a demonstration row gets no policy-gradient term
    rows = [samples[0], samples[-1]]
    rows[-1].advantage = 1.0
    batch = batch_of(rows, tok.pad_token_id)
    logp = (-torch.rand(batch.mask.shape) - 0.1).requires_grad_()
    pol = Policy(None, logp, logp.detach() - 0.1, torch.tensor([s.advantage for s in rows]), "token-mean")
    pg, stats = SampledPG(0.2)(batch, pol)
    (pg * batch.mask).sum().backward()
    assert stats["demo_rows"] == 1 and bool(pg[0].abs().sum() > 0) and float(pg[1].abs().sum()) == 0.0
    assert float(logp.grad[1].abs().sum()) == 0.0 and float(logp.grad[0].abs().sum()) > 0
    nll, st = DemonstrationNLL(1.0)(batch, pol)  # the demonstration is trained by likelihood instead
    assert float(nll[0].abs().sum()) == 0.0 and st["demo_nll"] > 0


@pytest.fixture(scope="module")
def played(tmp_path_factory, tiny_llama_dir):  # noqa: F811
    """A world, and one trained self-play iteration whose examine phase was replayed from
    examiner demonstrations and a garbled copy of each (a reject of the same target hops)."""
    from flows.selfplay import run_selfplay

    root = tmp_path_factory.mktemp("update")
    write(WorldConfig(seed=3, entities=200), root, "w")
    docs, triples = load_table("w", "documents", root).to_pylist(), load_table("w", "triples", root).to_pylist()
    tools = base_rows()
    sim = Simulator(docs, seed=0, tools=tools)
    demos = demonstrations(docs, triples, sim, next(t for t in tools if t["name"] == EXAMINER_TOOL), n=4)[0]
    cfg = PlayConfig(dataset="w", examiner=str(tiny_llama_dir), student=str(tiny_llama_dir), tasks=len(demos),
                     attempts=2, student_turns=2, max_new_tokens=12, batch_size=8, checkpoints=str(root / "ck"),
                     examiner_steps=2, student_steps=2, update_batch=2, lr=1e-3, warmstart_steps=2, warmstart_lr=1e-3)
    by_id = {d["doc_id"]: d for d in docs}
    convs = []
    for demo in demos:
        msgs, hops, seed = demo["trajectory"]["messages"], demo["task"]["hop_count"], by_id[demo["task"]["qcp"]["seed_doc_id"]]
        convs += [(msgs, seed, hops), (msgs[:-1] + [{"role": "assistant", "content": GARBLED}], seed, hops)]
    replay_examine(root, cfg, run_id(cfg, root), 0, convs, docs)
    summary = run_selfplay(PlayConfig(**{**cfg.__dict__, "resume": True}), root, progress=False)
    return root, cfg, summary, len(demos)


def _weights(path) -> dict:
    return {k: v.clone() for k, v in AutoModelForCausalLM.from_pretrained(path).state_dict().items()}


def test_a_trained_iteration_updates_examiner_and_student_and_every_attempt_has_its_task(played, tiny_llama_dir):  # noqa: F811
    root, cfg, summary, n_tasks = played
    assert summary["skipped_phases"] == 1 and n_tasks >= 2
    tasks = load_table("w_selfplay", "tasks", root).to_pylist()
    attempts = [r for r in load_table("w_selfplay", "rollouts", root).to_pylist()
                if json.loads(r["meta"])["role"] == "student"]
    assert len(tasks) == n_tasks and len(attempts) == 2 * n_tasks
    assert {a["prompt_id"] for a in attempts} == {t["task_id"] for t in tasks}
    assert all(QCP.from_json(t["qcp"]).steps for t in tasks)
    start = _weights(tiny_llama_dir)
    it = summary["iterations"][0]  # the examiner was warm-started on the world's demonstrations first
    assert it["warmstart_demos"] > 0 and it["warmstart_loss"][1] < it["warmstart_loss"][0]
    warm = _weights(f"{cfg.checkpoints}/warmstart/final")
    assert any(not torch.equal(start[k], warm[k]) for k in start)
    for role in ("examiner", "student", "teacher"):
        path = summary["models"][role]
        assert path.startswith(cfg.checkpoints), role
        moved = _weights(path)
        assert any(not torch.equal(start[k], moved[k]) for k in start), f"the {role} did not change"
    assert it["teacher_s"] > 0 and it["student_update_s"] > it["teacher_s"]
    console = Console(record=True, width=200)  # what `forgeplay selfplay run` prints
    console.print(_iteration_table(summary), _timing_table(summary))
    text = console.export_text()
    assert "of which teacher scoring" in text and f"{it['teacher_s']:.1f}" in text and f"{it['student_loss']:.4f}" in text


def test_the_teacher_is_the_ema_of_the_students_steps(played, tmp_path, tiny_llama_dir):  # noqa: F811
    from selfplay.update import ExaminerUpdateConfig, StudentUpdateConfig, learns
    from train.configs import TrainConfig
    from train.run import run_stage

    root, cfg, summary, _ = played
    out = tmp_path / "student"
    stage = StudentUpdateConfig(data="w_selfplay", run=summary["run_id"], iteration=0, model=str(tiny_llama_dir),
                                out=str(out), tau=0.3)
    run_stage("selfplay-student", stage, TrainConfig(max_steps=3, batch_size=2, lr=1e-3, checkpoint_every=1,
                                                     checkpoints_kept=5, keep_checkpoints=True), root, progress=False)
    ema = _weights(tiny_llama_dir)
    for step in (1, 2, 3):  # the student after each optimizer step
        student = torch.load(out / "checkpoints" / f"step-{step:08d}" / "model.pt")
        ema = {k: (1 - 0.3) * v + 0.3 * student[k] if v.is_floating_point() else v for k, v in ema.items()}
    teacher = _weights(out / "teacher")
    assert all(torch.allclose(teacher[k], ema[k], atol=1e-6) for k in ema)
    assert any(not torch.equal(teacher[k], student[k]) for k in ema)  # behind the student, not a copy
    # no attempt was right: without a teacher the student has nothing to learn; the examiner has
    assert not learns("selfplay-student", replace(stage, distill_coef=0.0), root)
    # its examine phase was replayed: the examiner learns from the demonstrations by likelihood or not at all
    examiner = ExaminerUpdateConfig(data="w_selfplay", run=summary["run_id"])
    assert learns("selfplay-examiner", examiner, root) and not learns("selfplay-examiner", replace(examiner, demo_coef=0.0), root)


def test_the_examiner_update_of_a_replayed_iteration_trains_demonstrations_only(played, tiny_llama_dir):  # noqa: F811
    from selfplay.samples import replayed
    from selfplay.update import ExaminerUpdateConfig, build_examiner
    from train.configs import TrainConfig

    root, cfg, summary, n_tasks = played
    built = build_examiner(ExaminerUpdateConfig(data="w_selfplay", run=summary["run_id"], model=str(tiny_llama_dir)),
                           TrainConfig(batch_size=2), root)
    rows = {r["id"]: r for r in load_table("w_selfplay", "rollouts", root).to_pylist()}
    assert len(built.data) == n_tasks and all(s.demo and s.advantage == 0 for s in built.data)
    assert all(replayed(rows[s.rollout_id]) for s in built.data)  # the demonstrations, none of the garbled copies
    loss, stats = built.step(built.model, built.data[:2])
    assert stats["demo_rows"] == 2 and stats["pg_loss"] == 0.0 and stats["demo_nll"] > 0


def test_update_options_are_checked_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="--checkpoints"):
        PlayConfig(dataset="w").check()
    with pytest.raises(ValueError, match="--distill must be on or off"):
        PlayConfig(dataset="w", checkpoints="c", distill="maybe").check()
    with pytest.raises(ValueError, match="--warmstart-steps"):
        PlayConfig(dataset="w", checkpoints="c", warmstart_steps=0).check()
    PlayConfig(dataset="w", checkpoints="c", warmstart_steps=0, warmstart=False).check()
    PlayConfig(dataset="w", warmstart_steps=0, train=False).check()  # no training, no warm-start
    with pytest.raises(ValueError, match="--answer-f1"):
        PlayConfig(dataset="w", train=False, answer_f1=0).check()
    cfg = PlayConfig(dataset="w", checkpoints="c", iterations=4, distill_coef="1,0.5")
    assert cfg.lambdas() == [1.0, 0.5, 0.5, 0.5]
    assert PlayConfig(dataset="w", checkpoints="c", iterations=2, distill="off").lambdas() == [0.0, 0.0]


def test_both_updates_sharded_equal_unsharded(played, tmp_path, tiny_llama_dir):  # noqa: F811
    """`--shard full` in one process (FSDP over a one-rank group, train/shard.py): the examiner's
    and the student's updates (the EMA teacher following a sharded student) give the weights
    the unsharded updates give, the sharded teacher resumes from a sharded checkpoint; and the
    student in two processes (`python -m selfplay` under torchrun, the teacher sharded too),
    sharded or not, alike."""
    from selfplay.update import ExaminerUpdateConfig, StudentUpdateConfig
    from train.configs import TrainConfig
    from train.run import run_stage

    root, _, summary, _ = played
    for kind, config in (("selfplay-examiner", ExaminerUpdateConfig), ("selfplay-student", StudentUpdateConfig)):
        finals = {}
        for shard in ("none", "full"):
            out = tmp_path / f"{kind}-{shard}"
            s = run_stage(kind, config(data="w_selfplay", run=summary["run_id"], iteration=0, model=str(tiny_llama_dir),
                                       out=str(out)),
                          TrainConfig(max_steps=2, batch_size=2, lr=1e-3, shard=shard), root, progress=False)
            assert s["steps"] == 2
            finals[shard] = _weights(out / "final")
            if kind == "selfplay-student":
                finals[shard + "-teacher"] = _weights(out / "teacher")
        # Adam turns rounding-level gradient differences of near-zero entries into steps of up
        # to ~lr/10 (as in tests/train/test_distributed.py), hence atol 1e-4
        diff = max(float((finals["full"][k] - v).abs().max()) for k, v in finals["none"].items())
        print(f"{kind}: max abs weight diff, --shard full vs none: {diff:.3g}")
        assert diff < 1e-4, (kind, diff)
        if kind == "selfplay-student":
            for k, v in finals["none-teacher"].items():
                assert torch.allclose(finals["full-teacher"][k], v, atol=1e-4), k
            # the sharded teacher rides in the sharded checkpoint: stopped after step 1 and resumed,
            # student and teacher are the uninterrupted run's
            out = tmp_path / "student-full-resumed"
            for steps, resume in ((1, False), (2, True)):
                run_stage(kind, config(data="w_selfplay", run=summary["run_id"], iteration=0,
                                       model=str(tiny_llama_dir), out=str(out)),
                          TrainConfig(max_steps=steps, batch_size=2, lr=1e-3, shard="full", resume=resume),
                          root, progress=False)
            for name in ("final", "teacher"):
                got, want = _weights(out / name), finals["full" if name == "final" else "full-teacher"]
                assert all(torch.allclose(got[k], v, atol=1e-6) for k, v in want.items()), name
    two = {}
    for shard in ("none", "full"):
        out = tmp_path / f"two-{shard}"
        s = run_stage("selfplay-student", StudentUpdateConfig(data="w_selfplay", run=summary["run_id"], iteration=0,
                                                              model=str(tiny_llama_dir), out=str(out)),
                      TrainConfig(max_steps=2, batch_size=1, lr=1e-3, shard=shard, nproc=2), root, progress=False)
        assert s["steps"] == 2 and len(s["last"]["batch"]) == 2  # one sample a rank
        two[shard], two[shard + "-teacher"] = _weights(out / "final"), _weights(out / "teacher")
    diff = max(float((two["full"][k] - v).abs().max()) for k, v in two["none"].items())
    print(f"selfplay-student in 2 processes: max abs weight diff, --shard full vs none: {diff:.3g}")
    assert diff < 1e-4
    for k, v in two["none-teacher"].items():
        assert torch.allclose(two["full-teacher"][k], v, atol=1e-4), k
    start = _weights(tiny_llama_dir)
    assert any(not torch.equal(two["none"][k], v) for k, v in start.items())  # it trained
    assert any(not torch.equal(two["full-teacher"][k], v) for k, v in start.items())  # the sharded teacher moved

"""experiments/qcp_teacher.py's logic: its tasks carry the path that answers them, the teacher
reads that path where the student reads the question alone, a prompt read once scores each
completion as the backend's own scoring does, and the bootstrap interval behaves."""

from __future__ import annotations

import pytest

from experiments.qcp_teacher import answer_of, bootstrap, prompt_ids, scores, tasks_from_world
from selfplay.qcp import QCP


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    return tasks_from_world(12, seed=1, entities=200, root=tmp_path_factory.mktemp("qcp"))


def test_tasks_are_distinct_questions_whose_path_holds_the_answer(tasks):
    assert len(tasks) == 12 and len({t["question"] for t in tasks}) == 12
    found = 0
    for t in tasks:
        qcp = QCP.from_json(t["qcp"])
        assert qcp.steps and all(step.query for step in qcp.steps)
        passages = " ".join(p for step in qcp.steps for p in step.passages)
        found += t["answer"].lower() in passages.lower() or t["answer"].lower() in ("yes", "no")
    assert found >= 9  # (a computed answer, years between two dates, is in no passage)


def test_the_teacher_reads_the_path_and_the_student_the_question_alone(tasks):
    from transformers import AutoTokenizer

    from generators.llm.model_store import resolve_model

    tok = AutoTokenizer.from_pretrained(str(resolve_model(None)))
    t = tasks[0]
    teacher, student = tok.decode(prompt_ids(tok, t, "qcp")), tok.decode(prompt_ids(tok, t, "none"))
    step = QCP.from_json(t["qcp"]).steps[0]
    assert t["question"] in teacher and t["question"] in student
    assert step.query in teacher and all(p in teacher for p in step.passages)
    assert "How the question was built" in teacher and "How the question was built" not in student


def test_a_prompt_read_once_scores_each_completion_as_the_backend_does(tasks):
    from generators.llm.transformers_backend import TransformersBackend

    backend = TransformersBackend(None, batch_size=4)
    tok = backend.tokenizer
    prompt = prompt_ids(tok, tasks[0], "qcp")
    comps = [tok(f"<answer>{a}</answer>", add_special_tokens=False)["input_ids"] for a in (tasks[0]["answer"], "Ulm")]
    once = scores(backend, prompt, comps)
    each = backend.score([prompt, prompt], comps)
    assert [len(x) for x in once] == [len(c) for c in comps]
    assert all(a == pytest.approx(b, abs=1e-3) for x, y in zip(once, each) for a, b in zip(x, y))
    backend.close()


def test_the_bootstrap_interval_holds_the_mean_and_narrows():
    small = [0.0, 1.0] * 10
    mean, low, high = bootstrap(small)
    assert mean == 0.5 and low < 0.5 < high
    _, low2, high2 = bootstrap(small * 10)
    assert high2 - low2 < (high - low) / 2
    assert bootstrap(small, seed=3) == bootstrap(small, seed=3)


def test_the_answer_is_read_from_its_tag_or_the_first_line():
    assert answer_of("<answer> Ulm </answer> because") == "Ulm"
    assert answer_of("<answer>Ulm") == "Ulm"
    assert answer_of("Ulm is the city.\nMore.") == "Ulm is the city."

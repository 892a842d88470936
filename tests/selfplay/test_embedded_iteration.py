"""Slow: one short self-play iteration with the embedded model in both roles, end to end
through the `selfplay` flow: the examiner's warm-start on the world's demonstrations, the
examiner writing tasks by searching, the filter (parser, task rules, answerability read by
the student), the student's attempts and both updates. Sizes are the smallest that run every
phase: what the 135M model writes is not judged here, only that every output is kept as a
task or a reject with a known reason and every attempt points to a task."""

import pytest

from generators.corpus.build import WorldConfig, write
from selfplay.examiner import REJECTS
from selfplay.play import PlayConfig
from storage import Catalog
from tests.generators.conftest import embedded_dir, model_cache  # noqa: F401 (fixtures)
from validators.answerability import AnswerabilityCheck
from validators.question_rules import TaskRules

pytestmark = pytest.mark.slow
CODES = set(REJECTS) | set(TaskRules().codes()) | set(AnswerabilityCheck.reasons)


def test_one_iteration_of_the_embedded_model_runs_every_phase(embedded_dir, tmp_path):  # noqa: F811
    from flows.selfplay import run_selfplay

    write(WorldConfig(seed=3, entities=200), tmp_path, "w")
    cfg = PlayConfig(dataset="w", examiner=str(embedded_dir), student=str(embedded_dir), tasks=3, attempts=2,
                     examiner_turns=2, student_turns=2, max_new_tokens=48, batch_size=6,
                     checkpoints=str(tmp_path / "ck"), warmstart_steps=1, warmstart_lr=1e-4, examiner_steps=1,
                     student_steps=1, update_batch=1, train_layers=2)
    s = run_selfplay(cfg, tmp_path, progress=False)
    it = s["iterations"][0]
    assert it["examiner_outputs"] == 3 and it["warmstart_demos"] > 0
    assert s["models"]["examiner"].startswith(cfg.checkpoints)  # the warm-started examiner, at least
    with Catalog(tmp_path) as cat:
        examiner = cat.rows("SELECT id, json_extract_string(meta, '$.reject') FROM w_selfplay_rollouts "
                            "WHERE json_extract_string(meta, '$.role') = 'examiner'")
        tables = {r[0] for r in cat.rows("SHOW TABLES")}
        tasks = {r[0] for r in cat.rows("SELECT task_id FROM w_selfplay_tasks")} if "w_selfplay_tasks" in tables else set()
        attempts = cat.rows("SELECT prompt_id FROM w_selfplay_rollouts WHERE json_extract_string(meta, '$.role') = 'student'")
        failed = {r[0] for r in cat.rows("SELECT reason FROM w_selfplay_verdicts WHERE NOT passed")}
    assert len(examiner) == 3 and len(tasks) == it["tasks"] == sum(r[1] is None for r in examiner)
    assert failed <= CODES and {r[1] for r in examiner if r[1]} <= failed
    assert len(attempts) == 2 * len(tasks) and {a[0] for a in attempts} == tasks
    assert sum(it["rejects"].values()) == 3 - it["tasks"]  # the summary counts the rejects by reason
    for key in ("warmstart_s", "generation_s", "filter_s"):
        assert it[key] > 0, key

"""The filter's model-based check: a task the examiner wrote must be answerable from its own
path and not from nothing.

After `play.examined` has parsed the examiner's outputs, the accepted tasks go through the
answerability layer of validators/ (validators/answerability.py, as in SSP): a reader (by
default the current student) answers each question once from the path's documents
(`path_evidence`: the start document, each search's first result, the last search's results
that hold the answer) mixed with `answer_distractors` random documents, and once with no
documents. A task the reader cannot answer with them (`not_answerable_with_context`), or
answers without them (`answerable_without_context`), becomes a reject with that reason: its
task row is dropped, its rollout's reward and task id are cleared, and its `verdicts` row
(layer answerability, check ssp) says why. Greedy replies, so a phase redone after a kill
gives the same verdicts.

    outs = [examined(...) for ...]
    check_answerable(outs, student_backend, {doc_id: (title, text)}, cfg, iteration)
"""

from __future__ import annotations

import json

from validators.answerability import check_answerability


def check_answerable(outs: list[dict], reader, documents: dict[str, tuple[str, str]], cfg, iteration: int) -> dict:
    """Check the accepted outputs of `outs` in place (module docstring); counts of passed and rejected."""
    accepted = [o for o in outs if o["task"]]
    verdicts = check_answerability([o["task"] for o in accepted], "tasks", reader, documents, cfg.answer_distractors,
                                   cfg.answer_f1, seed=cfg.seed * 1009 + iteration) if accepted else []
    rejected = 0
    for o, v in zip(accepted, verdicts):
        o["verdicts"].append(v.row(o["rollout"]["id"], "rollouts"))
        if not v.passed:
            rejected += 1
            meta = {**json.loads(o["rollout"]["meta"]), "task_id": None, "reject": v.reason}
            o["rollout"] = {**o["rollout"], "reward": 0.0, "meta": json.dumps(meta, sort_keys=True)}
            o["task"], o["reason"] = None, v.reason
    return {"answerable": len(accepted) - rejected, "unanswerable": rejected}

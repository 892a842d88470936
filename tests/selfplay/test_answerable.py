"""The filter's answerability check: a task passes when the reader answers it from its path's
documents and not without them; otherwise it becomes a reject with the layer's reason, its
task row gone, its rollout's reward and task id cleared, and a verdicts row that says why.
Readers here are scripted (the model is the expensive boundary); the check is the real one."""

import json

from generators.llm.base import Completion
from selfplay.answerable import check_answerable
from selfplay.play import PlayConfig, examined
from tests.selfplay.conftest import DOCS, DOCUMENTS, GOOD_FINAL, GOOD_TURNS
from validators.answerability import path_evidence


class Reader:
    """Replies `<answer>Ben Orr</answer>` when `rule(prompt)` holds, else a wrong answer;
    keeps every prompt it read."""

    def __init__(self, rule):
        self.rule, self.prompts, self.model = rule, [], "scripted"

    def generate(self, requests):
        out = []
        for r in requests:
            prompt = r.messages[-1]["content"]
            self.prompts.append(prompt)
            text = "<answer>Ben Orr</answer>" if self.rule(prompt) else "<answer>Sand</answer>"
            out.append([Completion(text=text, token_ids=[], logprobs=None, finish_reason="stop")])
        return out


def _outs(conversation):
    good = examined(conversation(GOOD_TURNS, GOOD_FINAL), DOCS[0], 2, PlayConfig(dataset="w"), "r", 0, 0, DOCUMENTS)
    garbled = examined(conversation(GOOD_TURNS, "<think>x</think>"), DOCS[0], 2, PlayConfig(dataset="w"), "r", 0, 1,
                       DOCUMENTS)
    assert good["task"] and not garbled["task"]
    return [good, garbled]


def test_the_path_evidence_is_the_start_each_first_result_and_the_answers_documents(conversation):
    task = _outs(conversation)[0]["task"]
    ids = path_evidence(task, DOCUMENTS)
    assert ids[0] == "d1" and "d2" in ids and len(ids) == len(set(ids))
    assert path_evidence(dict(task, qcp=json.dumps(task["qcp"])), DOCUMENTS) == ids  # stored as JSON text too


def test_a_task_read_from_its_path_passes_and_only_accepted_outputs_are_read(conversation):
    outs = _outs(conversation)
    reader = Reader(lambda p: "Ben Orr" in p.split("Question:")[0])  # answers only from a passage that says it
    counts = check_answerable(outs, reader, DOCUMENTS, PlayConfig(dataset="w", answer_distractors=1), 0)
    assert counts == {"answerable": 1, "unanswerable": 0}
    assert len(reader.prompts) == 2  # with the path's documents, and with none: the reject is not read
    assert "Ben Orr" in reader.prompts[0] and "Question:" in reader.prompts[1]
    good = outs[0]
    assert good["task"] and [v["check"] for v in good["verdicts"]] == ["examiner", "ssp"]
    assert good["verdicts"][1]["passed"] and good["verdicts"][1]["record_id"] == good["rollout"]["id"]
    assert len(outs[1]["verdicts"]) == 1  # the parser's reject only


def test_a_reader_that_knows_without_documents_or_cannot_read_them_rejects_the_task(conversation):
    for rule, reason in ((lambda p: True, "answerable_without_context"), (lambda p: False, "not_answerable_with_context")):
        outs = _outs(conversation)
        counts = check_answerable(outs, Reader(rule), DOCUMENTS, PlayConfig(dataset="w"), 0)
        good = outs[0]
        assert counts == {"answerable": 0, "unanswerable": 1}
        assert good["task"] is None and good["reason"] == reason
        assert good["rollout"]["reward"] == 0.0
        meta = json.loads(good["rollout"]["meta"])
        assert meta["task_id"] is None and meta["reject"] == reason
        assert not good["verdicts"][1]["passed"] and good["verdicts"][1]["reason"] == reason

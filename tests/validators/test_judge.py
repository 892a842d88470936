"""The judge layer's verdicts: a reply without a readable score is a reject with its own code
unless --judge-lenient, a record without an assistant turn another; --judge-sample N judges
the first N records of a run across chunks and a resume after a kill (the tiny random Llama
as the judge, through the real validate flow over Parquet)."""

import json

import pytest

import flows.validate as fv
from generators.llm.base import Completion
from generators.llm.registry import BackendConfig
from storage import load_table, resumable
from validators.judge import judge_records
from validators.reasons import REASONS


class Replies:
    """Stands in for the judge model: replies by a rule on the prompt."""

    name, model = "replies", "replies"

    def generate(self, requests, progress=False):
        return [[Completion(text="no idea" if "Quentin" in r.messages[0]["content"] else "SCORE: 8 fine")]
                for r in requests]


def test_an_unreadable_reply_is_a_reject_unless_lenient(world):
    _, rows, _, _ = world
    bad = json.loads(json.dumps(rows[0]))
    bad["messages"][-1]["content"] = "<think>x</think><answer>Quentin</answer>"
    empty = dict(rows[1], messages=[m for m in rows[1]["messages"] if m["role"] != "assistant"])
    good, unread, none = judge_records([rows[0], bad, empty], Replies())
    assert good.passed and good.score == 0.8
    assert not unread.passed and unread.reason == "judge_unparseable" and unread.score == 0.8  # the other turns read
    assert not none.passed and none.reason == "judge_no_turns"
    lenient = judge_records([bad], Replies(), lenient=True)[0]
    assert lenient.passed and lenient.reason == "judge_unparseable"
    assert {"judge_unparseable", "judge_no_turns"} <= set(REASONS)


def test_judge_sample_judges_the_first_n_records_of_a_run_across_a_kill(world, tiny_llama_dir, monkeypatch):
    root, rows, _, _ = world
    cfg = fv.ValidateConfig(dataset="w", out="w_judged", layers="judge", judge_sample=5, chunk=3,
                            judge_max_tokens=4, run_id="judge-sample")
    backend = BackendConfig(model=str(tiny_llama_dir))
    real, state = resumable.ShardWriter, {"n": 0}

    class Dying(real):  # the run "dies" at the 2nd chunk's verdicts: chunk 1's 3 judge verdicts are committed
        def close(self):
            if self.kind == "verdicts":
                state["n"] += 1
                if state["n"] == 2:
                    raise KeyboardInterrupt("killed")
            return super().close()

    monkeypatch.setattr(resumable, "ShardWriter", Dying)
    with pytest.raises(KeyboardInterrupt):
        fv.run(cfg, backend, data_root=root, progress=False)
    assert len(load_table("w", "verdicts", root, run_id="judge-sample")) == 3
    monkeypatch.setattr(resumable, "ShardWriter", real)
    s = fv.run(cfg, backend, data_root=root, progress=False)
    verdicts = load_table("w", "verdicts", root, run_id="judge-sample").to_pylist()
    order = [r["id"] for r in rows]
    assert sorted(order.index(v["record_id"]) for v in verdicts) == [0, 1, 2, 3, 4]  # the first 5, once each
    # a random model writes no readable score: each judged record is a reject with that code
    assert {(v["passed"], v["reason"]) for v in verdicts} <= {(False, "judge_unparseable"), (False, "judge_low_score")}
    assert s["rows_out"] == len(rows) - 5  # the records not in the sample pass
    funnel = {(f["layer"], f["reason"]): f["rejected"] for f in s["funnel"] if f["reason"]}
    assert sum(funnel.values()) == 5 and {r for _, r in funnel} <= {"judge_unparseable", "judge_low_score"}

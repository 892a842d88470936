"""The question construction path: built from an examiner conversation (one step per search
call with its query, doc ids, passages and note), round-tripped through its JSON form, and
rendered for the teacher with or without passages and answer."""

import json

import pytest

from generators.llm.toolcalls import format_tool_call
from selfplay.qcp import QCP, Step, qcp_from_messages, teacher_context


def results(*docs):
    return json.dumps({"results": [{"doc_id": d, "title": f"T{d}", "snippet": f"passage of {d}"} for d in docs]})


HAND_WRITTEN = [
    {"role": "system", "content": "You are an examiner."},
    {"role": "user", "content": "Start document: Ada Quell"},
    {"role": "assistant", "content": "<think>Where was Ada born?</think>\n"
                                     + format_tool_call("search_person", {"query": "Ada Quell birthplace"})},
    {"role": "tool", "name": "search_person", "content": results("d1", "d7")},
    {"role": "assistant", "content": "<think>Now the mayor.</think>\n"
                                     + format_tool_call("search_place", {"query": "Velmora mayor", "top_k": 2})},
    {"role": "tool", "name": "search_place", "content": results("d2")},
    {"role": "assistant", "content": "<think>Done.</think><question>Who is the mayor?</question><answer>Ben Orr</answer>"},
]


def test_two_searches_give_two_steps():
    qcp = qcp_from_messages(HAND_WRITTEN, seed_doc_id="d1")
    assert qcp.seed_doc_id == "d1"
    assert [s.query for s in qcp.steps] == ["Ada Quell birthplace", "Velmora mayor"]
    assert [s.doc_ids for s in qcp.steps] == [("d1", "d7"), ("d2",)]
    assert [s.passages for s in qcp.steps] == [("passage of d1", "passage of d7"), ("passage of d2",)]
    assert [s.note for s in qcp.steps] == ["Where was Ada born?", "Now the mayor."]


def test_calls_of_one_turn_pair_with_the_tool_messages_in_order():
    calls = "".join(format_tool_call("general_search", {"query": q}) for q in ("a", "b", "c"))
    messages = [{"role": "assistant", "content": f"<think>three at once</think>{calls}"},
                {"role": "tool", "content": results("x")},
                {"role": "tool", "content": json.dumps({"error": "invalid_arguments", "detail": "top_k"})},
                {"role": "assistant", "content": "<question>q?</question><answer>x</answer>"}]
    steps = qcp_from_messages(messages).steps
    assert [(s.query, s.doc_ids, s.note) for s in steps] == [("a", ("x",), "three at once"), ("b", (), "three at once"),
                                                             ("c", (), "three at once")]  # error, then unanswered


@pytest.mark.parametrize("junk", [None, "text", [None, 3, {"role": "tool", "content": "{"}, {"role": "assistant"}]])
def test_malformed_messages_give_an_empty_path(junk):
    assert qcp_from_messages(junk).steps == ()


def test_round_trip_is_exact():
    qcp = qcp_from_messages(HAND_WRITTEN, seed_doc_id="d1")
    obj = qcp.to_json()
    assert set(obj) == {"seed_doc_id", "hops"} and set(obj["hops"][0]) == {"query", "doc_ids", "note", "passages"}
    assert QCP.from_json(obj) == qcp
    assert QCP.from_json(json.dumps(obj)) == qcp
    assert json.loads(json.dumps(QCP.from_json(obj).to_json())) == obj
    unseeded = QCP((Step("q", ("d",), ("p",), ""),))
    assert QCP.from_json(unseeded.to_json()) == unseeded and unseeded.to_json()["seed_doc_id"] is None


def test_rows_without_passages_read_back_with_none():
    qcp = QCP.from_json({"seed_doc_id": None, "hops": [{"query": "q", "doc_ids": ["d"], "note": "n", "passages": None}]})
    assert qcp.steps[0].passages == () and qcp.steps[0].doc_ids == ("d",)
    with pytest.raises(ValueError):
        QCP.from_json({"seed_doc_id": None})


def test_teacher_context_modes():
    task = {"question": "Who is the mayor?", "answer": "Ben Orr", "qcp": qcp_from_messages(HAND_WRITTEN).to_json()}
    with_path = teacher_context(task, "qcp")
    with_answer = teacher_context(task, "answer")
    bare = teacher_context(task, "none")
    for text in (with_path, with_answer, bare):
        assert "Who is the mayor?" in text
    for piece in ("Ada Quell birthplace", "Velmora mayor", "passage of d1", "passage of d7", "passage of d2"):
        assert piece in with_path and piece not in with_answer and piece not in bare
    assert "Ben Orr" in with_answer and "Ben Orr" not in with_path and "Ben Orr" not in bare
    assert "Where was Ada born?" not in with_path  # the examiner's notes are not shown
    assert bare == "Question: Who is the mayor?"
    with_path_i = with_path.index
    assert with_path_i("Ada Quell birthplace") < with_path_i("passage of d1") < with_path_i("Velmora mayor")
    with pytest.raises(ValueError):
        teacher_context(task, "everything")

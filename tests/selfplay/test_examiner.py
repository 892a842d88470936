"""The examiner: its prompt; a well-formed conversation gives a tasks row that fits the
storage schema and passes the task rules; each kind of bad conversation is rejected with its
reason code; any final text gives a Reject with a known code or a schema-valid row."""

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generators.llm.toolcalls import format_tool_call
from selfplay.examiner import REJECTS, examiner_messages, parse_examiner
from selfplay.qcp import QCP
from storage.schema import load
from storage.shards import stamp
from tests.selfplay.conftest import DOCS, DOCUMENTS, GOOD_FINAL, GOOD_TURNS, QUESTION
from validators.question_rules import TaskRules, check_task_rules
from validators.trajectory_rules import RuleContext
from validators.verdict import Reject

KNOWN_CODES = set(REJECTS) | set(TaskRules.reasons) | {"check_crashed"}


def schema_valid(row: dict) -> None:
    schema = load("tasks")
    schema.validate_rows(stamp([row], schema, "run"))


def test_prompt_holds_format_tools_document_and_hops():
    system, user = examiner_messages(DOCS[1], 3, "<tools>\nsearch_place(query: string)\n</tools>")
    assert system["role"] == "system" and user["role"] == "user"
    for piece in ("<think>", "<tool_call>", "<question>", "<answer>", "search_place(query: string)"):
        assert piece in system["content"]
    assert "Velmora" in user["content"] and DOCS[1]["text"] in user["content"] and "3" in user["content"]
    with pytest.raises(ValueError):
        examiner_messages(DOCS[1], 0, "")


def test_good_conversation_gives_a_valid_task(conversation):
    messages = conversation(GOOD_TURNS, GOOD_FINAL)
    row = parse_examiner(messages, 2, "task-1", "demo", seed_doc_id="d1", examiner_step=4, documents=DOCUMENTS)
    assert (row["question"], row["answer"], row["hop_count"], row["examiner_step"]) == (QUESTION, "Ben Orr", 2, 4)
    qcp = QCP.from_json(row["qcp"])
    assert qcp.queries() == ["Velmora", "Velmora mayor"] and qcp.seed_doc_id == "d1"
    assert "d2" in qcp.steps[-1].doc_ids and any("Ben Orr" in p for p in qcp.steps[-1].passages)
    assert qcp.steps[0].note == "Ada was born in Velmora; who runs it?"
    schema_valid(row)
    verdicts = check_task_rules(row, RuleContext(documents=DOCUMENTS))
    assert [v.check for v in verdicts] == ["fields", "length", "qcp", "leak", "evidence", "answer_reached"]
    assert all(v.passed and v.reason == "ok" for v in verdicts)
    stored = stamp([row], load("tasks"), "run")
    back = pa.Table.from_pylist(stored, schema=load("tasks").arrow).to_pylist()[0]
    assert back["qcp"] == row["qcp"]  # the passages survive the Arrow round trip


BAD_CALL = "<think>x</think><tool_call>{not json}</tool_call>"
TWO_Q = f"<question>{QUESTION}</question><question>Where?</question><answer>Ben Orr</answer>"
TWO_A = f"<question>{QUESTION}</question><answer>Ben Orr</answer><answer>Orr</answer>"
CASES = [
    ("no_question", GOOD_TURNS, "<think>hm</think><answer>Ben Orr</answer>"),
    ("no_question", GOOD_TURNS, "<question>  </question><answer>Ben Orr</answer>"),
    ("no_question", GOOD_TURNS, "<think><question>hidden in the thought</question></think><answer>Ben Orr</answer>"),
    ("multiple_questions", GOOD_TURNS, TWO_Q),
    ("no_answer", GOOD_TURNS, f"<question>{QUESTION}</question>"),
    ("no_answer", GOOD_TURNS, f"<question>{QUESTION}</question><answer> </answer>"),
    ("multiple_answers", GOOD_TURNS, TWO_A),
    ("answer_in_question", GOOD_TURNS, "<question>Is the mayor of Velmora called Ben Orr?</question><answer>ben orr</answer>"),
    ("no_search", [], GOOD_FINAL),
    ("too_few_searches", [("once", ["Velmora mayor"]), ("again", ["velmora  MAYOR"])], GOOD_FINAL),
    ("answer_not_in_last_step", [("a", ["Velmora mayor"]), ("b", ["river Sand floods"])],
     GOOD_FINAL.replace("Ben Orr</answer>", "Zed Ulm</answer>")),
]


@pytest.mark.parametrize("code, turns, final", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_conversation_is_rejected_with_its_code(conversation, code, turns, final):
    hops = 3 if code == "too_few_searches" else 2
    with pytest.raises(Reject) as e:
        parse_examiner(conversation(turns, final, hops), hops, "task-1", "demo", seed_doc_id="d1", documents=DOCUMENTS)
    assert e.value.reason == code


def test_unreadable_tool_call_is_rejected(conversation):
    messages = conversation(GOOD_TURNS, GOOD_FINAL)
    messages.insert(-1, {"role": "assistant", "content": BAD_CALL})
    with pytest.raises(Reject) as e:
        parse_examiner(messages, 2, "task-1", "demo")
    assert e.value.reason == "unparseable_call"


def test_searches_enough_for_the_target_only(conversation):
    messages = conversation(GOOD_TURNS, GOOD_FINAL, hops=3)
    assert parse_examiner(messages, 3, "t", "demo")["hop_count"] == 2  # two distinct queries suffice for 3 hops
    with pytest.raises(Reject) as e:
        parse_examiner(messages, 4, "t", "demo")
    assert e.value.reason == "too_few_searches"


def test_a_search_without_results_is_no_evidence(conversation):
    messages = conversation(GOOD_TURNS, GOOD_FINAL)
    messages.insert(-1, {"role": "assistant", "content": format_tool_call("general_search", {"query": "zzz"})})
    messages.insert(-1, {"role": "tool", "content": '{"results": []}'})
    with pytest.raises(Reject) as e:
        parse_examiner(messages, 2, "t", "demo")
    assert e.value.reason == "qcp_step_no_evidence"


TAGS = ["<think>", "</think>", "<question>", "</question>", "<answer>", "</answer>", "<tool_call>", "</tool_call>",
        '{"name": "general_search", "arguments": {"query": "Velmora"}}', "Ben Orr", "Velmora", " ", "\n"]
bit = st.one_of(st.sampled_from(TAGS), st.text(max_size=20))
shaped = st.builds("{}<question>{}</question>{}<answer>{}</answer>{}".format, bit, st.text(max_size=40), bit,
                   st.one_of(st.sampled_from(["Ben Orr", "Velmora", ""]), st.text(max_size=20)), bit)
final_text = st.one_of(st.text(max_size=300), st.lists(bit, max_size=14).map("".join), shaped)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(final=final_text, hops=st.integers(1, 4), documents=st.sampled_from([None, DOCUMENTS]))
def test_any_final_text_gives_a_reject_or_a_valid_row(conversation, final, hops, documents):
    messages = conversation(GOOD_TURNS, final, hops)
    try:
        row = parse_examiner(messages, hops, "task-h", "demo", seed_doc_id="d1", documents=documents)
    except Reject as r:
        assert r.reason in KNOWN_CODES, r.reason
        return
    schema_valid(row)
    assert row["question"].strip() and row["answer"].strip()

"""A user's own file validated against a named corpus (`--corpus`), and `--strict`: a check
that could not run rejects instead of passing. The case: good trajectories in which one tool
message was made up (its results' document ids changed) pass every layer when nothing can
replay their calls; with the corpus they are rejected, and the summary (the CLI's funnel)
says how many records had a check skipped."""

import json

import pytest

import flows.validate as fv
from storage import load_table
from validators.validator import ValidateConfig


def _corrupt(row: dict) -> dict | None:
    """The row with its first tool result made up (other document ids, the same text, so no
    think reads differently), or None without one."""
    messages = [dict(m) for m in row["messages"]]
    for m in messages:
        body = json.loads(m["content"]) if m["role"] == "tool" else {}
        if body.get("results"):
            for r in body["results"]:
                r["doc_id"] += "0"
            m["content"] = json.dumps(body)
            return dict(row, messages=messages)
    return None


@pytest.fixture(scope="module")
def their_file(world, tmp_path_factory):
    """(path, ids of the good rows, ids of the corrupted ones): 10 good, the rest corrupted."""
    _, rows, _, _ = world
    bad = [c for c in (_corrupt(r) for r in rows[10:]) if c is not None]
    for b in bad:  # a user's file: the records' ids are whatever it says
        b["id"] = "bad-" + b["id"]
    path = tmp_path_factory.mktemp("theirs") / "theirs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:10] + bad))
    return path, {r["id"] for r in rows[:10]}, {b["id"] for b in bad}


def _verdicts(root, dataset: str, check: str) -> dict[str, tuple[bool, str]]:
    return {v["record_id"]: (v["passed"], v["reason"]) for v in load_table(dataset, "verdicts", root).to_pylist()
            if v["check"] == check}


def test_their_corrupted_tool_messages_pass_without_a_corpus_and_the_summary_says_replay_was_skipped(world, their_file):
    root = world[0]
    path, good, bad = their_file
    s = fv.run(ValidateConfig(input=str(path), out="theirs_plain", layers="schema,rules"), data_root=root, progress=False)
    accepted = set(load_table("theirs_plain", "trajectories", root).column("id").to_pylist())
    assert len(bad) >= 20 and accepted == good | bad  # nothing could tell them apart
    assert s["skipped_checks"] == [{"layer": "rules", "check": "replay", "reason": "replay_skipped_no_corpus",
                                    "records": len(good | bad)}]


def test_with_the_corpus_every_corrupted_message_is_rejected_and_good_rows_pass(world, their_file):
    root = world[0]
    path, good, bad = their_file
    s = fv.run(ValidateConfig(input=str(path), out="theirs_corpus", corpus="w", layers="schema,rules"),
               data_root=root, progress=False)
    accepted = set(load_table("theirs_corpus", "trajectories", root).column("id").to_pylist())
    assert accepted == good and s["skipped_checks"] == []
    replay = _verdicts(root, "theirs_corpus", "replay")
    assert {replay[i] for i in bad} == {(False, "replay_mismatch")}
    assert {replay[i] for i in good} == {(True, "ok")}


def test_strict_rejects_a_check_that_could_not_run(world, their_file):
    root = world[0]
    path, good, bad = their_file
    s = fv.run(ValidateConfig(input=str(path), out="theirs_strict", strict=True, layers="schema,rules"),
               data_root=root, progress=False)
    assert s["rows_out"] == 0 and s["skipped_checks"] == []
    replay = _verdicts(root, "theirs_strict", "replay")
    assert set(replay.values()) == {(False, "replay_skipped_no_corpus")} and set(replay) == good | bad
    reasons = {(f["check"], f["reason"]): f["rejected"] for f in s["funnel"] if f["reason"]}
    assert reasons == {("replay", "replay_skipped_no_corpus"): len(good | bad)}


def test_a_corpus_without_documents_is_a_clear_error(world, their_file):
    with pytest.raises(ValueError, match="--corpus 'nope' has no documents"):
        fv.run(ValidateConfig(input=str(their_file[0]), out="x", corpus="nope"), data_root=world[0], progress=False)

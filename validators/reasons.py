"""Every reason code a validator can give, with what it means (one table, so rejects are
always explained). `describe(code)` looks one up; codes not listed here are a bug (a test
checks that every code the validators emit is in this table).

    python -m validators.reasons      # print the table
"""

from __future__ import annotations

REASONS: dict[str, str] = {
    # schema layer
    "not_an_object": "the record is not a JSON object (bad JSON line, list, string, number ...)",
    "schema_violation": "the record breaks its kind's JSON Schema (detail names the field)",
    "unknown_kind": "the record kind has no schema",
    # rules layer: structure
    "no_messages": "the trajectory has no usable message list",
    "role_order": "roles are out of order: system?, user, then assistant/tool turns, final assistant",
    "empty_message": "a message has empty content",
    "think_missing": "an assistant turn does not start with <think>...</think>",
    "think_malformed": "an assistant turn has an unclosed or repeated <think> block",
    "text_outside_calls": "a non-final assistant turn holds text besides tool calls after </think>",
    "no_tool_calls": "a non-final assistant turn has no tool call",
    "tool_call_bad_json": "a <tool_call> block is not valid JSON",
    "tool_call_malformed": "a <tool_call> block is unclosed, unopened, not an object or lacks a name/arguments",
    "tool_calls_mismatch": "the tool calls in the text differ from the structured tool_calls list",
    "tool_message_mismatch": "tool messages do not answer the calls of the turn before (ids, names, count)",
    "final_not_answer": "the final assistant turn has tool calls or is not the last message",
    "answer_missing": "the final turn has no <answer>...</answer>",
    "answer_multiple": "the final turn has more than one <answer>",
    "answer_empty": "the final <answer> is empty or unclosed",
    # rules layer: tools
    "unknown_tool": "a call names a tool that is not offered",
    "bad_tool_schema": "an offered tool's parameters are not a valid JSON Schema",
    "arguments_invalid": "call arguments break the tool's JSON Schema and are not a flagged injected error",
    "injected_error_not_an_error": ("a call flagged as an injected argument error has valid arguments, or one flagged as a "
                                    "repeated call repeats no earlier call"),
    "injected_error_not_repaired": "an injected error is not corrected in the next assistant turn",
    "repair_changed_tool": "an argument-error repair calls a different tool",
    "repair_changed_other_arguments": "an argument-error repair changes the query instead of fixing the faulty argument",
    "tool_not_needed": "an unflagged call uses a tool outside the trajectory's correct tools",
    "route_mismatch": "the shape of the calls (rounds x calls per round) does not fit the route",
    "unknown_route": "the route is not single, parallel, sequential or mixed",
    "replay_mismatch": "replaying a call with the simulator does not reproduce the tool message",
    "retriever_changed": "a call does not replay because the retriever changed (another kind, another index fingerprint, or other results for the call's search than were recorded), not the record",
    "replay_failed": "a call cannot be replayed (missing replay keys or documents)",
    "replay_skipped_no_corpus": "passed: no documents/tool bank available, replay not checked (--corpus gives "
                                "one; --strict rejects)",
    "wrong_answer": "the final answer does not match the gold answer or an alias after normalization",
    "think_unsupported_number": "a <think> mentions a number or date that no earlier message holds and that is "
                                "not a sum or difference of numbers it states (an invented fact)",
    "think_unsupported_name": "a <think> mentions a capitalised name that no earlier message holds (an invented fact)",
    "final_think_states_no_fact": ("the final <think> of a compared, computed or multi-hop answer states no fact it "
                                   "follows from (no value compared, no number used, no entity in between: it names "
                                   "only pages; validators/final_facts.py)"),
    "question_kind_unknown": ("passed: the record says neither its question type nor its hop count (meta qtype, "
                              "hop_count) and its answer is neither yes/no nor computed, so whether its final "
                              "<think> must state a fact was not checked (--strict rejects)"),
    "no_rules_for_kind": "passed: the rules layer has no checks for this record kind",
    # rules layer: triples and tasks
    "question_blank": "the question is empty or only whitespace",
    "answer_blank": "the answer is empty or only whitespace",
    "answer_in_question": "the question contains the answer (leak), and does not offer it as a choice",
    "no_golden_docs": "a triple lists no golden documents",
    "golden_doc_duplicate": "a triple lists a golden document twice",
    "hop_count_mismatch": "hop_count does not fit the golden documents (triples: more hops than documents) "
                          "or the question construction path (tasks: not its number of steps)",
    "support_not_golden": "a supporting fact cites a document that is not golden",
    "golden_doc_missing": "a golden document is not among the dataset's documents",
    "support_sentence_missing": "a supporting sentence is not in its document's text",
    "derivation_failed": "the triple's relation program cannot run on the facts of its golden documents",
    "derived_answer_mismatch": "the triple's relation program, rerun on its golden documents, gives another answer",
    "no_program": "passed: the triple carries no relation program (imported), the answer is not re-derived",
    "documents_unknown": "passed: the dataset's documents are not known (input file), document checks skipped",
    "question_too_short": "a task's question has fewer words than validators.question_rules.MIN_QUESTION_WORDS",
    "qcp_empty": "a task's question construction path has no steps",
    "qcp_step_no_query": "a step of the question construction path has no query",
    "qcp_step_no_evidence": "a step of the question construction path lists no evidence documents",
    "evidence_doc_missing": "the seed or a step's evidence document is not among the dataset's documents",
    "answer_not_in_last_step": "neither the answer nor an alias appears in the last step's documents",
    # corpus question builder (validators/chain_checks.py)
    "question_unparseable": "the model's reply to the question prompt holds no question",
    "question_skips_hop": "a part of a question written hop by hop does not link: the last hop's question does not "
                          "name the page it reaches through, or a link's phrase does not name the page before",
    "answer_not_in_last_passage": "the answer is not in the last passage of the question's chain",
    "not_answerable_with_chain": "a reader given the chain's passages does not answer the question",
    "answerable_from_last_passage": "a reader answers the question from the chain's last passage alone (no hops needed)",
    "answerable_without_chain": "a reader answers the question from the retriever's top-k for it without the chain's "
                                "passages (a shortcut around the chain)",
    # judge layer
    "judge_low_score": "the LLM judge scored a turn below the threshold",
    "judge_unparseable": "the judge's reply had no readable score (a reject; passed with this code under --judge-lenient)",
    "judge_no_turns": "the record has no assistant turn for the judge to read",
    "judge_skipped_sample": "passed: record not in the judge sample",
    # answerability layer
    "not_answerable_with_context": "the model cannot answer from golden context mixed with distractors",
    "answerable_without_context": "the model answers without any context (leakage or trivial question)",
    "no_context": "passed: no golden documents to build a context from, only the no-context check ran",
    # dataset layer
    "exact_duplicate": "same normalized text as an earlier record",
    "near_duplicate": "MinHash/Jaccard similarity to an earlier record above the threshold",
    "heldout_overlap": "near or exact duplicate of a held-out evaluation item (contamination)",
    # generic
    "ok": "passed",
    "check_crashed": "a check raised an unexpected error (detail has it); the record is rejected",
}


# Codes of a check that passed without running (nothing to check against): `--strict`
# turns them into rejects, and the validate summary counts them. (judge_skipped_sample is
# the user's own sampling choice, not a missing input, so it is not among them.)
SKIPPED: frozenset[str] = frozenset({"replay_skipped_no_corpus", "documents_unknown", "no_rules_for_kind",
                                     "no_program", "no_context", "question_kind_unknown"})


def describe(code: str | None) -> str:
    return REASONS.get(code or "ok", "unknown reason code")


if __name__ == "__main__":
    for k, v in REASONS.items():
        print(f"{k:32} {v}")

"""Layer 2 for question records: program rules over `triples` and `tasks`, each a small
check returning a Verdict; the layer stops at the first failing check.

triples: `fields` (question and answer not blank), `golden` (golden documents listed once
each, hop_count not above their number, supporting facts only from golden documents),
`leak` (the question does not contain the answer, unless it offers it as a choice:
comparison questions), `documents` (golden documents exist in the dataset and hold their
supporting sentences) and `derive` (a world triple whose meta carries a relation program
re-derives its answer from its golden documents' text: generators.corpus.derive).

tasks (examiner-built, with a question construction path): `fields`, `length` (a question
of at least MIN_QUESTION_WORDS words: a shorter one poses no multi-hop problem), `qcp` (at
least one step, each with a query and evidence documents; hop_count = number of steps), `leak`,
`evidence` (the seed and every step's documents exist) and `answer_reached` (the answer or
an alias appears in a document of the last step).

Checks that need the dataset's documents pass with reason `documents_unknown` when they
are not known (a user's --input file).

    from validators.question_rules import check_triple_rules, check_task_rules
    verdicts = check_triple_rules(row, RuleContext(documents={...}))

`TripleRules` and `TaskRules` are the rules layer's checks for the two kinds (validators/check.py).
"""

from __future__ import annotations


from generators.answers import normalize
from generators.corpus.derive import check_triple
from storage.schema import meta_of
from validators.check import CheckContext, PerRecordCheck
from validators.verdict import Reject, Verdict, ok, run_steps

LAYER = "rules"
MIN_QUESTION_WORDS = 6  # world questions have 7 or more; "Who is X?" is no multi-hop task


def _blank(value) -> bool:
    return not isinstance(value, str) or not value.strip()


def _fields(row: dict) -> None:
    if _blank(row.get("question")):
        raise Reject("question_blank")
    if _blank(row.get("answer")):
        raise Reject("answer_blank")


def _leak(row: dict, comparison: bool = False) -> None:
    """The answer's words, as a whole phrase, must not be in the question, unless the
    question offers the answer as one of its choices ("A or B"; comparison questions)."""
    q, a = f" {normalize(row['question'])} ", normalize(row["answer"])
    if not a or f" {a} " not in q or comparison:
        return
    if f" {a} or " in q or f" or {a} " in q:
        return
    raise Reject("answer_in_question", answer=row["answer"][:200])


# -- triples ------------------------------------------------------------------------------
def _golden(row: dict) -> None:
    golden = list(row.get("golden_doc_ids") or [])
    if not golden:
        raise Reject("no_golden_docs")
    if len(set(golden)) != len(golden):
        raise Reject("golden_doc_duplicate", golden_doc_ids=golden)
    hops = row.get("hop_count")
    if not isinstance(hops, int) or hops > len(golden):
        raise Reject("hop_count_mismatch", hop_count=hops, golden_docs=len(golden))
    for sf in row.get("supporting_facts") or []:
        if sf.get("doc_id") not in golden:
            raise Reject("support_not_golden", doc_id=sf.get("doc_id"))


def _triple_documents(row: dict, documents) -> Verdict | None:
    if documents is None:
        return ok(LAYER, "documents", reason="documents_unknown")
    missing = [d for d in row["golden_doc_ids"] if d not in documents]
    if missing:
        raise Reject("golden_doc_missing", doc_ids=missing[:10])
    for sf in row.get("supporting_facts") or []:
        if sf.get("sentence", "").strip() not in documents[sf["doc_id"]][1]:
            raise Reject("support_sentence_missing", doc_id=sf["doc_id"], sentence=str(sf.get("sentence"))[:200])
    return None


def _derive(row: dict, documents, cache: dict) -> Verdict | None:
    if "program" not in meta_of(row):
        return ok(LAYER, "derive", reason="no_program")
    if documents is None:
        return ok(LAYER, "derive", reason="documents_unknown")
    res = check_triple(row, documents, cache=cache)
    if res.ok:
        return ok(LAYER, "derive", detail={"derived": res.derived})
    if res.derived is None:
        raise Reject("derivation_failed", why=str(res.reason)[:300])
    raise Reject("derived_answer_mismatch", derived=res.derived, why=str(res.reason)[:300])


def check_triple_rules(row: dict, ctx) -> list[Verdict]:
    """Verdicts of the triple rules, ending at the first failing one."""
    docs = ctx.documents
    return run_steps(LAYER, [("fields", lambda: _fields(row)), ("golden", lambda: _golden(row)),
                             ("leak", lambda: _leak(row, comparison=row.get("qtype") == "comparison")),
                             ("documents", lambda: _triple_documents(row, docs)),
                             ("derive", lambda: _derive(row, docs, ctx.derive_cache))])


# -- tasks --------------------------------------------------------------------------------
def _length(row: dict) -> None:
    words = len(row["question"].split())
    if words < MIN_QUESTION_WORDS:
        raise Reject("question_too_short", words=words, minimum=MIN_QUESTION_WORDS)


def _qcp(row: dict) -> None:
    hops = (row.get("qcp") or {}).get("hops") or []
    if not hops:
        raise Reject("qcp_empty")
    for i, h in enumerate(hops):
        if _blank(h.get("query")):
            raise Reject("qcp_step_no_query", step=i)
        if not h.get("doc_ids"):
            raise Reject("qcp_step_no_evidence", step=i)
    if row.get("hop_count") != len(hops):
        raise Reject("hop_count_mismatch", hop_count=row.get("hop_count"), steps=len(hops))


def _evidence(row: dict, documents) -> Verdict | None:
    if documents is None:
        return ok(LAYER, "evidence", reason="documents_unknown")
    qcp = row["qcp"]
    seed = qcp.get("seed_doc_id")
    if seed is not None and seed not in documents:
        raise Reject("evidence_doc_missing", doc_id=seed, step="seed")
    for i, h in enumerate(qcp["hops"]):
        missing = [d for d in h["doc_ids"] if d not in documents]
        if missing:
            raise Reject("evidence_doc_missing", doc_ids=missing[:10], step=i)
    return None


def _text(documents: dict, doc_id: str) -> str:
    return f" {normalize(documents[doc_id][0] + ' ' + documents[doc_id][1])} "


def _names(row: dict) -> list[tuple[str, str]]:
    """(name, normalized name) of the task's answer, then its aliases."""
    return [(a, normalize(a) if isinstance(a, str) else "") for a in [row["answer"], *(row.get("aliases") or [])]]


def answer_documents(row: dict, documents: dict) -> list[str]:
    """The documents of the task's last search step whose text holds its answer or one of its
    aliases, as a whole phrase (in step order)."""
    names = [na for _, na in _names(row) if na]
    return [d for d in row["qcp"]["hops"][-1]["doc_ids"]
            if d in documents and any(f" {na} " in _text(documents, d) for na in names)]


def _answer_reached(row: dict, documents) -> Verdict | None:
    if documents is None:
        return ok(LAYER, "answer_reached", reason="documents_unknown")
    texts = [_text(documents, d) for d in answer_documents(row, documents)]
    for a, na in _names(row):
        if na and any(f" {na} " in t for t in texts):
            return ok(LAYER, "answer_reached", detail={"matched": a})
    raise Reject("answer_not_in_last_step", doc_ids=row["qcp"]["hops"][-1]["doc_ids"][:10])


def check_task_rules(row: dict, ctx) -> list[Verdict]:
    """Verdicts of the task rules, ending at the first failing one."""
    docs = ctx.documents
    return run_steps(LAYER, [("fields", lambda: _fields(row)), ("length", lambda: _length(row)),
                             ("qcp", lambda: _qcp(row)), ("leak", lambda: _leak(row)),
                             ("evidence", lambda: _evidence(row, docs)),
                             ("answer_reached", lambda: _answer_reached(row, docs))])


_SHARED_CODES = ("question_blank", "answer_blank", "answer_in_question", "hop_count_mismatch", "documents_unknown")


class TripleRules(PerRecordCheck):
    name, layer, kinds = "triple_rules", LAYER, ("triples",)
    reasons = _SHARED_CODES + ("no_golden_docs", "golden_doc_duplicate", "support_not_golden", "golden_doc_missing",
                               "support_sentence_missing", "derivation_failed", "derived_answer_mismatch", "no_program")

    def one(self, row: dict, ctx: CheckContext) -> list[Verdict]:
        return check_triple_rules(row, ctx.rules)


class TaskRules(PerRecordCheck):
    name, layer, kinds = "task_rules", LAYER, ("tasks",)
    reasons = _SHARED_CODES + ("question_too_short", "qcp_empty", "qcp_step_no_query", "qcp_step_no_evidence",
                               "evidence_doc_missing", "answer_not_in_last_step")

    def one(self, row: dict, ctx: CheckContext) -> list[Verdict]:
        return check_task_rules(row, ctx.rules)

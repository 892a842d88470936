"""The Check protocol and its registry: every reason code a check gives is one it declares
and validators/reasons.py describes; per-record checks run first; a new check is a class
and a registry line; an error inside a check rejects the record instead of crashing; and
`forgeplay validate --list-checks` lists every check with its kinds and codes."""

import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.validators.test_flow_models import Scripted
from tests.validators.test_property_dedup import records as random_records
from tests.validators.test_question_rules import TASK_CASES, TRIPLE_CASES, corpus, task_of  # noqa: F401
from tests.validators.test_trajectory_rules import CASES, bases  # noqa: F401
from validators.check import CheckContext, PerRecordCheck
from validators.reasons import REASONS
from validators.records import Records
from validators.registry import CHECKS, LAYERS, checks_for, listing
from validators.validator import ValidateConfig, Validator
from validators.verdict import fail, ok

ALL = ",".join(LAYERS)


def test_registry_lists_every_layer_in_order_with_described_codes():
    assert LAYERS == ("schema", "rules", "judge", "answerability", "dedup")
    for c in CHECKS:
        assert c.name and c.layer in LAYERS and set(c.codes()) <= set(REASONS), c.name
    for kind in ("trajectories", "triples", "tasks", "documents"):
        chosen = checks_for(list(LAYERS), kind)
        runs = [c.per_record for c in chosen]
        assert runs == sorted(runs, reverse=True)  # per-record checks first
        assert [c.layer for c in chosen] == sorted((c.layer for c in chosen), key=LAYERS.index)
        assert sum(c.layer == "rules" for c in chosen) == 1  # every kind has its rules (or none)


def emitted_codes_are_declared(rows: list, kind: str, rule_ctx, documents: dict) -> set[str]:
    """Run every check of every layer on `rows` (all of them, as --all-layers does) and
    check that each verdict's code is one its check declares; returns the codes seen."""
    cfg = ValidateConfig(kind=kind, layers=ALL, all_layers=True, judge_sample_rate=0.5, heldout=[])
    seen = set()
    for check in checks_for(list(LAYERS), kind):
        ctx = CheckContext(kind, cfg, rules=rule_ctx, backend=Scripted(), documents=documents)
        check.start(ctx)
        taken = [r for r in rows if check.any_value or isinstance(r, dict)]
        for vs in check.run(Records.of_values(taken), ctx):
            for v in vs:
                assert v.code in check.codes(), (check.name, v)
                seen.add(v.code)
    return seen


def test_trajectory_checks_give_only_declared_codes(world, rule_ctx, bases):  # noqa: F811
    _, rows, docs, _ = world
    broken = []
    for _, base, mutate, _ in CASES:
        row = copy.deepcopy(bases[base])
        mutate(row)
        broken.append(row)
    documents = {d["doc_id"]: (d["title"], d["text"]) for d in docs}
    copies = [dict(r, id=r["id"] + "-copy") for r in rows[:3]]
    seen = emitted_codes_are_declared(rows + broken + copies + ["not json", [1], None], "trajectories", rule_ctx, documents)
    assert {c for *_, c in CASES} - {"schema_violation"} <= seen  # the corrupted rows were really checked
    assert {"exact_duplicate", "judge_low_score", "not_an_object"} <= seen


def test_triple_and_task_checks_give_only_declared_codes(corpus):  # noqa: F811
    triples, ctx = corpus
    bridge = next(t for t in triples if t["qtype"] == "bridge" and len(t["golden_doc_ids"]) >= 3)
    for kind, cases in (("triples", TRIPLE_CASES), ("tasks", TASK_CASES)):
        broken = []
        for case in cases:  # the bases test_question_rules corrupts
            base = next(t for t in triples if t["qtype"] == case[1] and len(t["golden_doc_ids"]) >= 2) \
                if kind == "triples" else task_of(bridge, ctx.documents)
            row = copy.deepcopy(base)
            case[-2](row)
            broken.append(row)
        seen = emitted_codes_are_declared(triples[:5] + broken, kind, ctx, ctx.documents)
        assert {c[-1] for c in cases} - {"schema_violation"} <= seen, kind


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_records, st.sampled_from(["trajectories", "triples", "tasks", "documents"]))
def test_any_input_gets_codes_its_layer_declares(items, kind):
    v = Validator(ValidateConfig(kind=kind, layers="schema,rules,judge,dedup", all_layers=True), kind, backend=Scripted())
    rows, _ = v.process([(f"{i}", x) for i, x in enumerate(items)])
    for r in rows:
        declared = {code for c in CHECKS if (c.verdict_layer or c.layer) == r["layer"] and c.applies_to(kind)
                    for code in c.codes()}
        assert r["reason"] in declared, r


class AnswerNotEmpty(PerRecordCheck):  # a new check: these six lines and one registry entry
    name, layer, kinds, reasons = "answer_not_empty", "rules", ("triples",), ("answer_blank",)

    def one(self, row, ctx):
        blank = not str(row.get("answer") or "").strip()
        return [fail("rules", self.name, "answer_blank") if blank else ok("rules", self.name)]


def test_a_new_check_is_a_class_and_a_registry_line(corpus):  # noqa: F811
    triples, ctx = corpus
    registry = CHECKS + (AnswerNotEmpty(),)
    blank = dict(triples[0], answer=" ")
    records = [("good", triples[0]), ("blank", blank)]
    v = Validator(ValidateConfig(kind="triples", layers="schema,rules"), "triples", rule_ctx=ctx, registry=registry)
    rows, accepted = v.process(records)
    assert [r["check"] for r in rows if r["record_id"] == "good"][-1] == "answer_not_empty"  # after the triple rules
    assert not any(r["check"] == "answer_not_empty" for r in rows if r["record_id"] == "blank")  # stopped before
    assert [a["id"] for a in accepted] == ["good"]
    v = Validator(ValidateConfig(kind="triples", layers="schema,rules", all_layers=True), "triples", rule_ctx=ctx,
                  registry=registry)
    rows, _ = v.process(records)
    assert [r["reason"] for r in rows if r["check"] == "answer_not_empty"] == ["ok", "answer_blank"]
    assert listing(registry)[-1] == {"check": "answer_not_empty", "layer": "rules", "kinds": "triples",
                                     "runs": "per record", "reasons": ["answer_blank", "ok", "check_crashed"]}
    assert registry[-1] not in checks_for(list(LAYERS), "tasks", registry)  # only for its kinds


class Exploding(PerRecordCheck):
    name, layer, reasons = "exploding", "rules", ()

    def one(self, row, ctx):
        if row.get("answer") == "boom":
            raise RuntimeError("a bug in a check")
        return [ok("rules", self.name)]


def test_an_error_inside_a_check_rejects_that_record_only():
    v = Validator(ValidateConfig(kind="tasks", layers="rules", all_layers=True), "tasks",
                  registry=(Exploding(),))
    rows, accepted = v.process([("a", {"answer": "boom"}), ("b", {"answer": "fine"})])
    by = {r["record_id"]: r for r in rows}
    assert by["a"]["reason"] == "check_crashed" and not by["a"]["passed"]
    assert json.loads(by["a"]["detail"])["error"] == "RuntimeError: a bug in a check"
    assert by["b"]["passed"] and [a["id"] for a in accepted] == ["b"]


def test_cli_lists_every_check_with_its_kinds_and_codes():
    from flows.cli import app

    out = CliRunner().invoke(app, ["validate", "--list-checks"])
    assert out.exit_code == 0, out.output
    for row in listing():
        assert row["check"] in out.output and row["kinds"].split(",")[0] in out.output
        assert all(code in out.output for code in row["reasons"]), row["check"]

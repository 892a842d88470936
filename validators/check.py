"""The one shape of a validation check. A check says what it is (name, the `--layers` layer
it belongs to, the record kinds it applies to, the reason codes it can give) and how it
runs: per record (pure: runs in the flow's worker tasks, in any process) or shared (needs
the run's state, a model backend or the dedup index: runs in the flow process, in record
order). Either way one method, `run`, takes a batch of records and gives a list of
verdicts per record (an empty list: no verdict, e.g. a record not in the judge sample).

validators/registry.py lists the checks in layer order; the runner loops over them.
A new check is a subclass and a line in the registry:

    class AnswerNotEmpty(PerRecordCheck):
        name, layer, kinds, reasons = "answer_not_empty", "rules", ("triples",), ("answer_blank",)

        def one(self, row, ctx):
            return [ok("rules", self.name) if row.get("answer") else fail("rules", self.name, "answer_blank")]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from generators.tools.retriever import RetrieverError
from validators.verdict import Verdict, fail

STOPS = (RetrieverError,)  # not a record's fault (a retrieval server gone): the run stops, a rerun resumes



@dataclass
class CheckContext:
    """What a check may use besides the records: the record kind, the run's options (a
    ValidateConfig), and for rules the RuleContext; in the flow process also the model
    backend, the documents (answerability; `corpus` loads them on first need: a function
    giving the dataset's RuleContext) and per-check state kept for the run."""

    kind: str
    options: Any
    rules: Any = None  # validators.trajectory_rules.RuleContext
    backend: Any = None
    documents: dict = field(default_factory=dict)
    corpus: Callable[[], Any] | None = None
    state: dict = field(default_factory=dict)


class Check:
    """Base of every check (see the module docstring); subclasses set the class attributes."""

    name: str = ""
    layer: str = ""  # the --layers name
    verdict_layer: str = ""  # the `layer` of its verdict rows when it differs (dedup: "dataset")
    kinds: tuple[str, ...] | None = None  # record kinds it applies to; None: every kind
    reasons: tuple[str, ...] = ()  # reason codes it can give besides "ok"
    per_record: bool = True
    any_value: bool = False  # also gets values that are not JSON objects (else they skip it)
    uses_backend: bool = False
    columns: tuple[str, ...] | None = None  # the fields it reads (None: all); shared checks get at least these

    def applies_to(self, kind: str) -> bool:
        return self.kinds is None or kind in self.kinds

    def codes(self) -> tuple[str, ...]:
        """Every reason code this check may put on a verdict."""
        return tuple(dict.fromkeys(self.reasons + ("ok",)))

    def start(self, ctx: CheckContext) -> None:
        """Once per run, in the flow process, before the first batch (e.g. build an index)."""

    def remember(self, records, ctx: CheckContext) -> None:
        """Records this run accepted before a restart, in record order (e.g. into an index)."""

    def run(self, records, ctx: CheckContext) -> list[list[Verdict]]:
        """Verdicts for each of `records` (validators.records.Records), in order."""
        raise NotImplementedError


class PerRecordCheck(Check):
    """A check that looks at one record at a time: subclasses implement `one`. An error
    on a record becomes a `check_crashed` reject of that record, never a crash."""

    def one(self, value, ctx: CheckContext) -> list[Verdict]:
        raise NotImplementedError

    def codes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(super().codes() + ("check_crashed",)))

    def guarded(self, value, ctx: CheckContext) -> list[Verdict]:
        try:
            return self.one(value, ctx)
        except STOPS:
            raise
        except Exception as e:  # data is data: never crash on a record
            return [fail(self.verdict_layer or self.layer, self.name, "check_crashed",
                         detail={"error": f"{type(e).__name__}: {e}"[:300]})]

    def run(self, records, ctx: CheckContext) -> list[list[Verdict]]:
        return [self.guarded(v, ctx) for v in records.values]

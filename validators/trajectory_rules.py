"""Layer 2: program rules over a trajectory, each a small check returning a Verdict.

Checks, in order (the layer stops at the first failing check, since later checks read what
earlier ones parsed): `structure` (role order, no empty message), `format` (every assistant
turn starts with <think>; non-final turns hold only tool calls after </think>, mirrored in
`tool_calls` and answered by the tool messages; the final turn has exactly one <answer>),
`tools` (names offered, except a call flagged `unknown_tool` whose made-up tool the next
turn replaces with an offered one for the same query; arguments fit the tool's JSON Schema
unless flagged as an injected error that the next turn repairs, keeping the tool for argument
errors; a call flagged `repeated_call` repeats an earlier one and the next turn does not;
unflagged calls use correct tools), `route` (rounds x calls per round fit
single/parallel/sequential/mixed), `replay` (the simulator reproduces every tool message;
skipped with a passing verdict when no corpus is known; validators/replay.py: the layer's check
asks for a whole chunk's calls in one batch, `check_trajectories`), `answer` (normalized EM / token F1
against gold and aliases), `grounding` (every number and name a `<think>` mentions occurs
in an earlier message; validators/grounding.py) and `final_facts` (the final think of a
compared, computed or multi-hop answer states a fact it follows from; validators/final_facts.py;
left out when RuleContext.final_facts is off, `forgeplay validate --no-final-facts`).

    from validators.trajectory_rules import check_trajectory, RuleContext
    verdicts = check_trajectory(row, RuleContext())

`structure` and `format` read the record (validators/trajectory_format.py); the checks after
them read what it parsed.

Triples and tasks have their own rules (validators.question_rules); `check_record` picks by kind.
`TrajectoryRules` is the rules layer's check for trajectories, `NoRules` the one for kinds
without rules (validators/check.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import fastjsonschema

from generators.answers import match
from generators.synth.sources import Sources
from generators.tools.fill import roles_of
from storage.schema import meta_of
from validators.check import STOPS, CheckContext, PerRecordCheck
from validators.final_facts import check_final_facts
from validators.grounding import ground
from validators.question_rules import check_task_rules, check_triple_rules
from validators.replay import replay, replay_requests
from validators.rule_context import RuleContext
from validators.trajectory_format import Call, Parsed, parse, structure
from validators.verdict import Reject, Verdict, fail, ok, run_steps

LAYER = "rules"
ROUTES = ("single", "parallel", "sequential", "mixed")


@dataclass
class ToolSchema:
    """A tool's parameters compiled once (fastjsonschema), with a readable error, and the
    name of its lookup argument (generators.tools.fill.roles_of; `query` for the base tools)."""

    check: Callable[[Any], Any]
    lookup: str = "query"

    def error(self, args: Any) -> str | None:
        try:
            self.check(args)
            return None
        except fastjsonschema.JsonSchemaValueException as e:
            return str(e.message)[:200]


@lru_cache(maxsize=4096)
def tool_validator(parameters: str) -> ToolSchema | None:
    """Compiled validator for a tool's parameters (JSON text), cached per schema string."""
    try:
        schema = json.loads(parameters) if parameters else {"type": "object"}
        if not isinstance(schema, dict):
            return None
        schema.pop("$schema", None)
        return ToolSchema(fastjsonschema.compile(schema), roles_of(schema).lookup or "query")
    except (ValueError, TypeError, fastjsonschema.JsonSchemaDefinitionException):
        return None


# -- tools and route ---------------------------------------------------------------------------
def _repair_of(call: Call, nxt: list[Call]) -> Call | None:
    if (call.flag or "").startswith("wrong_args"):
        return next((c for c in nxt if c.name == call.name), None)
    return next((c for c in nxt if c.name != call.name and
                 ((c.query is not None and c.query == call.query) or (c.flag or "").startswith("wrong_args"))), None)


def _tools(row: dict, p: Parsed) -> set[int]:
    offered = {}
    for t in row.get("tools") or []:
        v = tool_validator(t.get("parameters") or "")
        if v is None:
            raise Reject("bad_tool_schema", tool=t.get("name"))
        offered[t.get("name")] = v
    for ti, turn in enumerate(p.turns):
        for c in turn:
            if c.name in offered:
                c.lookup = offered[c.name].lookup
            elif c.flag != "unknown_tool":  # only the unknown_tool case calls a tool that is not offered
                raise Reject("unknown_tool", tool=c.name, turn=ti)
    correct = set(row.get("correct_tools") or [])
    repairs: set[int] = set()
    for ti, turn in enumerate(p.turns):
        nxt = p.turns[ti + 1] if ti + 1 < len(p.turns) else []
        for c in turn:
            known = c.name in offered  # else a made-up tool, flagged unknown_tool (checked above)
            if not known:
                err = "not offered"
            elif isinstance(c.args, dict):
                err = offered[c.name].error(c.args)
            else:
                err = "arguments are not an object"
            valid = err is None
            if c.flag == "repeated_call":  # the repeat case: a call made before, which the next turn does not make again
                same = lambda x: x.name == c.name and x.args == c.args  # noqa: E731
                if not any(same(x) for t in p.turns[:ti] for x in t):
                    raise Reject("injected_error_not_an_error", tool=c.name, flag=c.flag)
                if any(same(x) for x in nxt):
                    raise Reject("injected_error_not_repaired", tool=c.name, flag=c.flag, turn=ti)
            elif c.flag:
                if (c.flag.startswith("wrong_args") and valid) or (c.flag == "unknown_tool" and known):
                    raise Reject("injected_error_not_an_error", tool=c.name, flag=c.flag)
                rep = _repair_of(c, nxt)
                if rep is None:
                    if c.flag.startswith("wrong_args") and any(x.query and x.query == c.query for x in nxt):
                        raise Reject("repair_changed_tool", tool=c.name)
                    raise Reject("injected_error_not_repaired", tool=c.name, flag=c.flag, turn=ti)
                if c.flag.startswith("wrong_args") and c.query is not None and rep.query != c.query:
                    raise Reject("repair_changed_other_arguments", tool=c.name, before=c.query, after=rep.query)
                repairs.add(id(rep))
            elif not valid:
                raise Reject("arguments_invalid", tool=c.name, turn=ti, error=err)
            elif correct and c.name not in correct:
                raise Reject("tool_not_needed", tool=c.name, turn=ti)
    return repairs


def route_shape(p: Parsed, repairs: set[int]) -> list[int]:
    """Distinct queries per effective round: repairs and retries of a seen query fold into
    the round before; flagged calls are not counted."""
    rounds: list[set] = []
    seen: set = set()
    for turn in p.turns:
        folds = all(id(c) in repairs or (c.query is not None and c.query in seen) for c in turn)
        good = {c.query if c.query is not None else f"{c.name}:{json.dumps(c.args, sort_keys=True)}"
                for c in turn if not c.flag}
        if rounds and folds:
            rounds[-1] |= good
        else:
            rounds.append(good)
        seen |= {c.query for c in turn if c.query is not None}
    return [len(r) for r in rounds if r]


def _route(row: dict, p: Parsed, repairs: set[int]) -> list[int]:
    route = row.get("route")
    sizes = route_shape(p, repairs)
    fits = {"single": sizes == [1], "parallel": len(sizes) == 1 and sizes[0] >= 2,
            "sequential": len(sizes) >= 2 and max(sizes) == 1,
            "mixed": len(sizes) >= 2 and max(sizes) >= 2}
    if route not in fits:
        raise Reject("unknown_route", route=route)
    if row.get("case") == "early_stop" and sizes:  # a skipped hop may shorten the route
        fits = {"single": sizes == [1], "parallel": len(sizes) == 1, "sequential": max(sizes) == 1, "mixed": True}
    if not fits[route]:
        raise Reject("route_mismatch", route=route, shape=sizes)
    return sizes


def _answer(row: dict, p: Parsed, ctx: RuleContext, meta: dict) -> Verdict:
    aliases = [a for a in (meta.get("aliases") or row.get("aliases") or []) if isinstance(a, str)]
    m = match(p.answer, str(row.get("answer") or ""), aliases)
    detail = {"em": m.em, "f1": round(m.f1, 4), "matched": m.matched, "prediction": p.answer[:200]}
    if m.em or m.f1 >= ctx.answer_min_f1:
        return ok(LAYER, "answer", score=m.f1, detail=detail)
    return fail(LAYER, "answer", "wrong_answer", score=m.f1, detail=detail)


def _final_facts(row: dict, p: Parsed, msgs: list[dict], meta: dict, before: Sources | None) -> Verdict:
    """The `final_facts` step (validators/final_facts.py): a pass, or a pass without checking
    (`question_kind_unknown`); raises Reject."""
    aliases = [a for a in (meta.get("aliases") or row.get("aliases") or []) if isinstance(a, str)]
    lookups = [v for turn in p.turns for c in turn if isinstance(c.args, dict)
               for v in c.args.values() if isinstance(v, str)]
    detail = check_final_facts(msgs, lookups, [str(row.get("answer") or ""), *aliases, p.answer], meta, before,
                               p.thinks.get(len(msgs) - 1))
    return ok(LAYER, "final_facts", reason=detail.pop("reason", "ok"), detail=detail or None)


def _grounding(st: dict) -> Verdict:
    """The `grounding` step, over the thinks the format step read and the plain texts the
    replay step found; keeps the messages before the last as read (`st["before"]`)."""
    detail, st["before"] = ground(st["msgs"], st["p"].thinks, st.get("plain"))
    return ok(LAYER, "grounding", detail=detail)


def _parse_steps(row: dict, st: dict) -> list:
    """The steps up to the replay: they parse the record into `st` (messages, calls, repairs)."""
    def fmt() -> Verdict:
        st["p"] = p = parse(st["msgs"])
        return ok(LAYER, "format", detail={"turns": len(p.turns)})

    def route() -> Verdict:
        return ok(LAYER, "route", detail={"shape": _route(row, st["p"], st["repairs"])})

    return [("structure", lambda: st.update(msgs=structure(row))),
            ("format", fmt),
            ("tools", lambda: st.update(repairs=_tools(row, st["p"]))),
            ("route", route)]


def _result_steps(row: dict, st: dict, ctx: RuleContext) -> list:
    """The steps from the replay on, over what `_parse_steps` parsed."""
    steps = [("replay", lambda: replay(st["p"], ctx, st.setdefault("meta", meta_of(row)), st.setdefault("plain", {}))),
             ("answer", lambda: _answer(row, st["p"], ctx, st["meta"])),
             ("grounding", lambda: _grounding(st))]
    if ctx.final_facts:
        steps.append(("final_facts", lambda: _final_facts(row, st["p"], st["msgs"], st["meta"], st.get("before"))))
    return steps


def check_trajectory(row: dict, ctx: RuleContext | None = None) -> list[Verdict]:
    """Verdicts of the rule checks, ending at the first failing one."""
    ctx = ctx or RuleContext()
    st: dict[str, Any] = {}
    verdicts = run_steps(LAYER, _parse_steps(row, st))
    if verdicts[-1].passed:
        verdicts += run_steps(LAYER, _result_steps(row, st, ctx))
    return verdicts


def check_trajectories(rows: list, ctx: RuleContext) -> list[list[Verdict]]:
    """`check_trajectory` of each row, with the replays of all rows asked as one batch
    (validators/replay.py): the same verdicts, row by row."""
    parsed = []
    for row in rows:
        st: dict[str, Any] = {}
        parsed.append((st, run_steps(LAYER, _parse_steps(row, st))))
    requests = []
    for row, (st, verdicts) in zip(rows, parsed):
        if verdicts[-1].passed:
            try:
                requests += replay_requests(st["p"], st.setdefault("meta", meta_of(row)))
            except Exception:  # noqa: BLE001 (the replay step reports it for this row)
                pass
    ctx.prefetch(requests)
    try:
        for row, (st, verdicts) in zip(rows, parsed):
            if verdicts[-1].passed:
                verdicts += run_steps(LAYER, _result_steps(row, st, ctx))
    finally:
        ctx.forget()
    return [verdicts for _, verdicts in parsed]


def check_record(row: dict, kind: str, ctx: RuleContext | None = None) -> list[Verdict]:
    """The rule checks of `kind`: trajectories here, triples and tasks in validators.question_rules."""
    if kind == "trajectories":
        return check_trajectory(row, ctx)
    if kind in ("triples", "tasks"):
        return (check_triple_rules if kind == "triples" else check_task_rules)(row, ctx or RuleContext())
    return [ok(LAYER, "rules", reason="no_rules_for_kind")]


class TrajectoryRules(PerRecordCheck):
    name, layer, kinds = "trajectory_rules", LAYER, ("trajectories",)
    reasons = ("no_messages", "role_order", "empty_message", "think_missing", "think_malformed", "text_outside_calls",
               "no_tool_calls", "tool_call_bad_json", "tool_call_malformed", "tool_calls_mismatch",
               "tool_message_mismatch", "final_not_answer", "answer_missing", "answer_multiple", "answer_empty",
               "unknown_tool", "bad_tool_schema", "arguments_invalid", "injected_error_not_an_error",
               "injected_error_not_repaired", "repair_changed_tool", "repair_changed_other_arguments",
               "tool_not_needed", "route_mismatch", "unknown_route", "replay_mismatch", "retriever_changed", "replay_failed",
               "replay_skipped_no_corpus", "wrong_answer", "think_unsupported_number",
               "think_unsupported_name", "final_think_states_no_fact", "question_kind_unknown")

    def one(self, row: dict, ctx: CheckContext) -> list[Verdict]:
        return check_trajectory(row, ctx.rules)

    def run(self, records, ctx: CheckContext) -> list[list[Verdict]]:
        """The records' verdicts with their replays batched (`check_trajectories`)."""
        try:
            return check_trajectories(records.values, ctx.rules or RuleContext())
        except STOPS:
            raise
        except Exception:  # noqa: BLE001 (a row's own error becomes its check_crashed verdict)
            return super().run(records, ctx)


RULED_KINDS = ("trajectories", "triples", "tasks")


class NoRules(PerRecordCheck):
    """Kinds the rules layer has no checks for pass it with `no_rules_for_kind`."""

    name, layer, reasons = "no_rules", LAYER, ("no_rules_for_kind",)

    def applies_to(self, kind: str) -> bool:
        return kind not in RULED_KINDS

    def one(self, row: dict, ctx: CheckContext) -> list[Verdict]:
        return [ok(LAYER, "rules", reason="no_rules_for_kind")]

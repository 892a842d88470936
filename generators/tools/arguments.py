"""Deliberately wrong tool arguments, for the "wrong arguments" reflection case.

`corrupt_arguments(tool_row, arguments, kind, rng)` returns arguments that break the tool's
JSON Schema in one named way (the "query" of the kinds is the tool's lookup argument,
generators.tools.fill.roles_of; a made-up argument only breaks a closed schema); the simulator answers them with
{"error": "invalid_arguments", ...}, and the next turn's reasoning fixes the call.

    rng = random.Random(7)
    bad, kind = corrupt_arguments(tool, {"query": "Ada Lovelace"}, "unknown_parameter", rng)
    sim.call(tool["name"], bad)   # -> '{"error": "invalid_arguments", "detail": "..."}'
"""

from __future__ import annotations

import copy
import random

import jsonschema

from generators.tools.base import parameters_of
from generators.tools.fill import roles_of

MISTAKES = ("missing_query", "unknown_parameter", "wrong_type", "out_of_range", "bad_enum")
_EXTRA_NAMES = ["name", "date", "sort", "q", "keywords", "filter", "limit", "category"]


def _applicable(kind: str, params: dict, lookup: str) -> bool:
    props = params.get("properties", {})
    if kind == "missing_query":
        return lookup in (params.get("required") or [])
    if kind == "unknown_parameter":  # only a closed schema rejects a made-up argument
        return params.get("additionalProperties") is False
    if kind == "out_of_range":
        return any(p.get("type") == "integer" and ("maximum" in p or "minimum" in p) for p in props.values())
    if kind == "bad_enum":
        return any("enum" in p for p in props.values())
    return True


def corrupt_arguments(tool: dict, arguments: dict, kind: str | None, rng: random.Random) -> tuple[dict, str]:
    """Arguments invalid for `tool` in the way `kind` names (a random applicable kind if None).
    Returns (bad_arguments, kind_used); a kind the schema cannot express falls back to wrong_type."""
    params = parameters_of(tool)
    props = params.get("properties", {})
    lookup = roles_of(params).lookup or "query"
    if kind is None:
        kind = rng.choice([k for k in MISTAKES if _applicable(k, params, lookup)])
    if kind not in MISTAKES:
        raise ValueError(f"kind must be one of {MISTAKES}")
    if not _applicable(kind, params, lookup):
        kind = "wrong_type"
    bad = copy.deepcopy(arguments)
    if kind == "missing_query":
        bad.pop(lookup, None)
        if not bad and "top_k" in props:
            bad["top_k"] = 5
    elif kind == "unknown_parameter":
        extra = rng.choice([n for n in _EXTRA_NAMES if n not in props])
        bad[extra] = str(bad.get(lookup, "")) or "x"
        if rng.random() < 0.5:
            bad.pop(lookup, None)  # the model put the query under a made-up name
    elif kind == "wrong_type":
        bad[lookup] = [str(bad.get(lookup, ""))]
    elif kind == "out_of_range":
        name, p = rng.choice(sorted((n, p) for n, p in props.items()
                                    if p.get("type") == "integer" and ("maximum" in p or "minimum" in p)))
        bad[name] = p["maximum"] + rng.randint(1, 90) if "maximum" in p else p["minimum"] - rng.randint(1, 90)
    elif kind == "bad_enum":
        name, p = rng.choice(sorted((n, p) for n, p in props.items() if "enum" in p))
        bad[name] = rng.choice(["any", "all", "unknown", "misc"]) + "_" + str(rng.randint(1, 9))
    if jsonschema.Draft202012Validator(params).is_valid(bad):  # never hand back valid arguments
        raise AssertionError(f"corruption {kind} left the arguments valid: {bad}")
    return bad, kind

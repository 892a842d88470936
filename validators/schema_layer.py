"""Layer 1: the record must fit its kind's JSON Schema (content fields only, so records a
user brings without our shared columns are judged the same way as committed ones).

The schema is compiled once per kind with fastjsonschema (generated Python code, ~10x
faster than jsonschema's interpreter), with the project's "json" string format. `SchemaCheck`
is the layer's check: rows read from a dataset's shards that validators/schema_arrow.py
proves valid from their Arrow columns get the same passing verdict without the per-row
check; every other row is checked here.

    from validators.schema_layer import check_schema
    check_schema(row, "trajectories")  -> Verdict
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from functools import lru_cache

import fastjsonschema

from storage.schema import KINDS, SHARED_COLUMNS, load_json
from validators.check import CheckContext, PerRecordCheck
from validators.schema_arrow import surely_valid
from validators.verdict import Verdict, fail, ok

LAYER = "schema"


@lru_cache(maxsize=4096)  # the texts that repeat (tool schemas); each chunk's distinct values are read once
def _parses(value: str) -> bool:
    try:
        json.loads(value)
        return True
    except ValueError:
        return False


def _is_json(value) -> bool:
    """The "json" string format; tool schemas repeat across records, so results are cached."""
    return isinstance(value, str) and _parses(value)


@lru_cache(maxsize=None)
def content_schema(kind: str) -> dict:
    """The kind's JSON Schema of its content fields (shared columns left out); KeyError for
    an unknown kind. Do not modify the returned dict (it is cached)."""
    js = copy.deepcopy(load_json(kind))
    js.pop("$schema", None)
    for name in SHARED_COLUMNS:
        js["properties"].pop(name, None)
    js["required"] = [r for r in js.get("required", []) if r not in SHARED_COLUMNS]
    return js


@lru_cache(maxsize=None)
def content_validator(kind: str):
    """A compiled validator of the kind's content fields, cached."""
    return fastjsonschema.compile(copy.deepcopy(content_schema(kind)), formats={"json": _is_json})


def content(row: dict) -> dict:
    """The row without shared columns; datetimes as ISO text."""
    return {k: (v.isoformat() if isinstance(v, (dt.datetime, dt.date)) else v)
            for k, v in row.items() if k not in SHARED_COLUMNS}


def check_schema(row, kind: str) -> Verdict:
    if not isinstance(row, dict):
        return fail(LAYER, "json_schema", "not_an_object", detail={"type": type(row).__name__})
    try:
        validator = content_validator(kind)
    except KeyError as e:
        return fail(LAYER, "json_schema", "unknown_kind", detail=str(e))
    try:
        validator(content(row))
    except fastjsonschema.JsonSchemaValueException as e:
        path = (e.name or "data").removeprefix("data").lstrip(".") or "(root)"
        return fail(LAYER, "json_schema", "schema_violation", detail={"field": path, "message": str(e.message)[:300]})
    except (TypeError, ValueError, RecursionError) as e:
        return fail(LAYER, "json_schema", "schema_violation", detail={"message": f"{type(e).__name__}: {e}"[:300]})
    return ok(LAYER, "json_schema")


class SchemaCheck(PerRecordCheck):
    """The schema layer: one `json_schema` verdict per record, of any kind, also for values
    that are not JSON objects (rejected as `not_an_object`)."""

    name, layer, any_value = "json_schema", LAYER, True
    reasons = ("not_an_object", "schema_violation", "unknown_kind")

    def one(self, value, ctx: CheckContext) -> list[Verdict]:
        return [check_schema(value, ctx.kind)]

    def run(self, records, ctx: CheckContext) -> list[list[Verdict]]:
        sure = None
        if records.table is not None and ctx.kind in KINDS:
            sure = surely_valid(records.table, content_schema(ctx.kind), {"json": _is_json})
        if sure is None or not sure.any():
            return super().run(records, ctx)
        passed = ok(LAYER, "json_schema")  # what check_schema gives every row that fits
        values = None if sure.all() else records.values
        return [[passed] if s else self.guarded(values[i], ctx) for i, s in enumerate(sure.tolist())]

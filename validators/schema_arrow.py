"""Which rows of an Arrow table surely fit a JSON Schema, decided on whole columns.

Rows read from committed shards are typed by Arrow already: a string column holds strings,
a list column lists, a struct column objects with all its fields. What is left to check is
the rest of the schema (nulls where the schema allows none, lengths, enums, minimums, the
"json" string format), which Arrow compute does per column instead of per row.

The answer is conservative: a row is "surely valid" only when every keyword on its path is
one this module understands and holds; anything else (an unknown keyword, a type Arrow does
not pin down, a format other than the given ones) marks the rows not sure, and the caller
checks those row by row. So for a sure row the per-row check can only pass
(tests/validators/test_schema_arrow.py checks that on random tables).

    sure = surely_valid(table, content_schema("trajectories"), {"json": is_json})  # numpy bools
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage.schema import SHARED_COLUMNS

_NOTES = {"description", "title", "$comment", "default", "examples", "x-arrow", "x-schema-version", "$schema", "$id"}
_KNOWN = _NOTES | {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
                   "minLength", "maxLength", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                   "format"}
_BOUNDS = (("minimum", pc.greater_equal), ("maximum", pc.less_equal),
           ("exclusiveMinimum", pc.greater), ("exclusiveMaximum", pc.less))
_LENGTHS = (("minLength", pc.greater_equal), ("maxLength", pc.less_equal))
_ITEMS = (("minItems", pc.greater_equal), ("maxItems", pc.less_equal))


def _np(mask) -> np.ndarray:
    """An Arrow boolean array (nulls count as not sure) as numpy."""
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def _type_of(node: dict) -> tuple[str | None, bool]:
    """(the one non-null JSON type, whether null is allowed); None when not exactly one."""
    t = node.get("type")
    types = [t] if isinstance(t, str) else list(t) if isinstance(t, list) else []
    rest = [x for x in types if x != "null"]
    return (rest[0] if len(rest) == 1 else None), "null" in types


def _bounds(values: pa.Array, node: dict, limits) -> np.ndarray:
    """Rows whose value (a number, a length) keeps the `limits` (keyword, compare) of `node`."""
    ok = np.ones(len(values), bool)
    for key, op in limits:
        if key in node:
            if isinstance(node[key], bool) or not isinstance(node[key], (int, float)):
                return ok & False
            ok &= _np(op(values, node[key]))
    return ok


def _string(arr: pa.Array, node: dict, formats: dict[str, Callable]) -> np.ndarray:
    ok = _bounds(pc.utf8_length(arr), node, _LENGTHS) if "minLength" in node or "maxLength" in node \
        else np.ones(len(arr), bool)
    if "enum" in node:
        ok &= _np(pc.is_in(arr, value_set=pa.array([e for e in node["enum"] if isinstance(e, str)], arr.type)))
    if "format" in node:
        fits = formats.get(node["format"])
        if fits is None:
            return ok & False
        distinct = pc.unique(arr.drop_null()).to_pylist()
        good = pa.array([s for s in distinct if fits(s)], arr.type)
        ok &= _np(pc.is_in(arr, value_set=good))
    return ok


def _array(arr: pa.Array, node: dict, formats: dict[str, Callable]) -> np.ndarray:
    if isinstance(node.get("items", {}), list):
        return np.zeros(len(arr), bool)
    ok = _bounds(pc.list_value_length(arr), node, _ITEMS)
    if "items" in node:
        off = arr.offsets.to_numpy()
        start = int(off[0])
        child = _node(arr.values.slice(start, int(off[-1]) - start), node["items"], formats)
        bad = np.concatenate([[0], np.cumsum(~child)])
        ok &= (bad[off[1:] - start] - bad[off[:-1] - start]) == 0
    return ok


def _object(children: dict[str, pa.Array], n: int, node: dict, formats: dict[str, Callable]) -> np.ndarray:
    """Objects whose keys are `children` (each of length n): every key present, nulls too."""
    props, extra = node.get("properties", {}), node.get("additionalProperties", True)
    if set(node.get("required", [])) - set(children) or not isinstance(props, dict):
        return np.zeros(n, bool)
    ok = np.ones(n, bool)
    for name, values in children.items():
        if name in props:
            ok &= _node(values, props[name], formats)
        elif extra is not True:
            return np.zeros(n, bool)
    return ok


def _node(arr: pa.Array, node: dict, formats: dict[str, Callable]) -> np.ndarray:
    """Rows of `arr` that surely fit `node` (a JSON Schema)."""
    n = len(arr)
    jtype, nullable = _type_of(node) if isinstance(node, dict) else (None, False)
    if jtype is None or set(node) - _KNOWN:
        return np.zeros(n, bool)
    at = arr.type
    if pa.types.is_null(at):
        ok = np.zeros(n, bool)
    elif jtype == "string" and (pa.types.is_string(at) or pa.types.is_large_string(at)):
        ok = _string(arr, node, formats)
    elif jtype == "integer" and pa.types.is_integer(at) and "enum" not in node:
        ok = _bounds(arr, node, _BOUNDS)
    elif jtype == "number" and (pa.types.is_integer(at) or pa.types.is_floating(at)) and "enum" not in node:
        ok = _bounds(arr, node, _BOUNDS)
    elif jtype == "boolean" and pa.types.is_boolean(at) and "enum" not in node:
        ok = np.ones(n, bool)
    elif jtype == "array" and (pa.types.is_list(at) or pa.types.is_large_list(at)) and "enum" not in node:
        ok = _array(arr, node, formats)
    elif jtype == "object" and pa.types.is_struct(at) and "enum" not in node:
        ok = _object({at.field(i).name: f for i, f in enumerate(arr.flatten())}, n, node, formats)
    else:
        return np.zeros(n, bool)
    if arr.null_count:
        null_fits = nullable and ("enum" not in node or None in node["enum"])
        ok = np.where(_np(arr.is_null()), null_fits, ok)
    return ok


def surely_valid(table: pa.Table, schema: dict, formats: dict[str, Callable]) -> np.ndarray:
    """Rows of `table` whose content (the columns but the shared ones, each row a dict with
    every column as a key) surely fits `schema`; `formats` checks string formats by name."""
    content = [c for c in table.column_names if c not in SHARED_COLUMNS]
    if not isinstance(schema, dict) or schema.get("type") != "object" or set(schema) - _KNOWN:
        return np.zeros(table.num_rows, bool)
    parts = []
    for batch in table.select(content).to_batches():
        parts.append(_object(dict(zip(content, batch.columns)), batch.num_rows, schema, formats))
    return np.concatenate(parts) if parts else np.zeros(table.num_rows, bool)

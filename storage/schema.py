"""Record schemas: one JSON Schema file per record kind, and the Arrow schema derived from it.

The JSON files in `storage/schemas/` are the source of truth. `load(kind)` inlines the shared
definitions (`_common.json`), adds the shared columns every row carries (id, run_id,
created_at, schema_version, lineage) and derives the pyarrow schema with `to_arrow`.
`KindSchema.validate_rows` checks plain-dict rows with jsonschema and raises `RowError`
naming the row and field; `record_id` gives the content hash used as `id`.

    from storage.schema import load
    s = load("trajectories"); s.arrow; s.version
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

import fastjsonschema
import jsonschema
import pyarrow as pa

SCHEMA_DIR = Path(__file__).parent / "schemas"
SHARED_COLUMNS = ("id", "run_id", "created_at", "schema_version", "lineage")
KINDS = ("documents", "triples", "tools", "trajectories", "tasks", "rollouts", "labels", "verdicts")

_FORMATS = jsonschema.FormatChecker()


@_FORMATS.checks("json", raises=ValueError)
def _is_json(value: object) -> bool:
    if isinstance(value, str):
        json.loads(value)
    return True


@_FORMATS.checks("date-time", raises=ValueError)
def _is_datetime(value: object) -> bool:
    if isinstance(value, str):
        dt.datetime.fromisoformat(value)
    return True


def _passes(check) -> object:
    def passes(value: object) -> bool:
        try:
            return bool(check(value))
        except ValueError:
            return False
    return passes


# whether a text parses as JSON, remembered: a run's rows repeat the same texts (the parameters
# of the tools every trajectory offers)
_json_text = lru_cache(maxsize=4096)(_passes(_is_json))


_FAST_FORMATS = {"json": lambda value: not isinstance(value, str) or _json_text(value),
                 "date-time": _passes(_is_datetime)}


class RowError(ValueError):
    """A row does not match its kind's schema; names the row index and the field."""

    def __init__(self, kind: str, row: int, field_path: str, message: str):
        self.kind, self.row, self.field, self.message = kind, row, field_path, message
        super().__init__(f"{kind} row {row}: field '{field_path}': {message}")


def _inline_refs(node: Any, common: dict) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("_common.json#/$defs/"):
            name = ref.rsplit("/", 1)[1]
            return _inline_refs(copy.deepcopy(common["$defs"][name]), common)
        return {k: _inline_refs(v, common) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline_refs(v, common) for v in node]
    return node


def _types(prop: dict) -> tuple[str, bool]:
    """The single non-null JSON type of a property, and whether null is allowed."""
    t = prop.get("type")
    if isinstance(t, list):
        rest = [x for x in t if x != "null"]
        if len(rest) != 1:
            raise ValueError(f"unsupported union type {t}")
        return rest[0], "null" in t
    if t is None:
        raise ValueError(f"property without a type: {prop}")
    return t, False


def arrow_type(prop: dict) -> pa.DataType:
    """The Arrow type of one JSON Schema property (see `to_arrow`)."""
    t, _ = _types(prop)
    if t == "string":
        return pa.timestamp("us", tz="UTC") if prop.get("format") == "date-time" else pa.string()
    if t == "integer":
        return pa.int32() if prop.get("x-arrow") == "int32" else pa.int64()
    if t == "number":
        return pa.float64()
    if t == "boolean":
        return pa.bool_()
    if t == "array":
        return pa.list_(arrow_type(prop["items"]))
    if t == "object":
        return pa.struct(_fields(prop))
    raise ValueError(f"unsupported JSON type {t!r}")


def _fields(obj: dict) -> list[pa.Field]:
    required = set(obj.get("required", []))
    out = []
    for name, prop in obj["properties"].items():
        _, nullable_type = _types(prop)
        out.append(pa.field(name, arrow_type(prop), nullable=nullable_type or name not in required))
    return out


def to_arrow(json_schema: dict, version: int) -> pa.Schema:
    """Derive the Arrow schema: string→string (date-time→timestamp[us, UTC]), integer→int64
    (int32 with x-arrow), number→float64, boolean→bool, array→list, object→struct.
    A field is non-nullable exactly when it is required and its type excludes null."""
    meta = {b"forgeplay.kind": json_schema["title"].encode(), b"forgeplay.schema_version": str(version).encode()}
    return pa.schema(_fields(json_schema), metadata=meta)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def record_id(row: dict) -> str:
    """Content hash of a row: sha256 over its non-shared fields, 32 hex chars."""
    content = {k: v for k, v in row.items() if k not in SHARED_COLUMNS and v is not None}
    return hashlib.sha256(canonical_json(content).encode()).hexdigest()[:32]


def meta_of(row: dict) -> dict:
    """A row's `meta` column (a JSON object as text) as a dict; {} when missing or unreadable."""
    return meta_dict(row.get("meta"))


def meta_dict(meta) -> dict:
    """A `meta` value, JSON text or already a dict, as a dict; {} when missing or unreadable."""
    if isinstance(meta, dict):
        return meta
    try:
        m = json.loads(meta or "{}")
    except (TypeError, ValueError):
        return {}
    return m if isinstance(m, dict) else {}


def _jsonable(row: dict) -> dict:
    """Row as jsonschema sees it: datetimes become ISO strings."""
    out = {}
    for k, v in row.items():
        out[k] = v.isoformat() if isinstance(v, (dt.datetime, dt.date)) else v
    return out


@dataclass
class KindSchema:
    """One record kind: its JSON Schema (with shared columns), Arrow schema and version."""

    kind: str
    version: int
    json: dict
    arrow: pa.Schema = field(repr=False)

    def __post_init__(self) -> None:
        self._validator = jsonschema.Draft202012Validator(self.json, format_checker=_FORMATS)

    def _fast(self):
        """The schema compiled by fastjsonschema (None where it cannot compile it)."""
        if not hasattr(self, "_compiled"):
            try:
                self._compiled = fastjsonschema.compile(copy.deepcopy(self.json), formats=_FAST_FORMATS)
            except Exception:  # noqa: BLE001 (jsonschema alone then)
                self._compiled = None
        return self._compiled

    @property
    def content_fields(self) -> list[str]:
        return [n for n in self.json["properties"] if n not in SHARED_COLUMNS]

    def table(self, rows: Sequence[dict]) -> pa.Table:
        """Dict rows as an Arrow table of the kind's columns: what `pa.Table.from_pylist(rows,
        schema=self.arrow)` gives (a missing key is null, a key the schema lacks is left out),
        built a column at a time, which costs half as much on rows of nested lists."""
        return pa.Table.from_arrays([pa.array([r.get(f.name) for r in rows], type=f.type) for f in self.arrow],
                                    schema=self.arrow)

    def validate_rows(self, rows: Iterable[dict]) -> None:
        """Raise RowError for the first row that breaks the schema. A row is checked with the
        schema compiled by fastjsonschema; only one that fails there is read by jsonschema,
        which has the last word and words the error."""
        fast = self._fast()
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise RowError(self.kind, i, "<row>", f"expected an object, got {type(row).__name__}")
            value = _jsonable(row)
            if fast is not None:
                try:
                    fast(value)
                    continue
                except Exception:  # noqa: BLE001 (jsonschema decides, below)
                    pass
            err = jsonschema.exceptions.best_match(self._validator.iter_errors(value))
            if err is not None:
                path = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in err.absolute_path)
                path = path.replace(".[", "[") or "<row>"
                raise RowError(self.kind, i, path, err.message)

    def with_added_column(self, name: str, prop: dict, version: int) -> "KindSchema":
        """A later version of this kind with one more optional column (schema evolution)."""
        js = copy.deepcopy(self.json)
        js["properties"][name] = prop
        js["x-schema-version"] = version
        return KindSchema(self.kind, version, js, to_arrow(js, version))


@lru_cache(maxsize=None)
def _common() -> dict:
    return json.loads((SCHEMA_DIR / "_common.json").read_text())


def load_json(kind: str) -> dict:
    """The kind's JSON Schema with shared columns added and `$ref`s inlined."""
    path = SCHEMA_DIR / f"{kind}.json"
    if not path.exists():
        raise KeyError(f"unknown record kind {kind!r}; known: {', '.join(KINDS)}")
    raw = json.loads(path.read_text())
    common = _common()
    shared = _inline_refs(common["$defs"]["shared"], common)
    props = {**shared, **_inline_refs(raw["properties"], common)}
    js = {"$schema": "https://json-schema.org/draft/2020-12/schema", **raw, "properties": props}
    js["required"] = list(SHARED_COLUMNS) + [r for r in raw.get("required", []) if r not in SHARED_COLUMNS]
    js.setdefault("additionalProperties", False)
    return js


@lru_cache(maxsize=None)
def _load_cached(kind: str) -> KindSchema:
    js = load_json(kind)
    version = int(js.get("x-schema-version", 1))
    return KindSchema(kind, version, js, to_arrow(js, version))


def load(kind: str) -> KindSchema:
    """The current schema of `kind` (one of KINDS)."""
    return _load_cached(kind)

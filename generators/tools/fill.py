"""Arguments for any tool, driven by its JSON Schema: which argument carries the lookup,
which take entity names, and a schema-valid value for every required argument.

`roles_of(parameters)` reads the roles from the top-level properties:
  lookup  the query-like string argument: `query` if there is one, else a string property
          named like a query (q, keyword, search, question, ...), else the first required
          plain string, else the first plain string (None: the tool cannot take a lookup)
  names   string or string-array properties whose name says they hold names (names,
          individual, subject, person, figure, alias, entity, title ...)
  k       `top_k` when it is an integer property (how many results to return)

`fill_arguments(parameters, lookup, names, rng)` fills the lookup, the name arguments and
every required argument (nested objects and arrays walked, `$ref`s to `$defs` followed):
enums and consts give an allowed value, strings a value quoted in the description as an
example (e.g. '详细' or 'comprehensive'), else the schema's examples or default, else
"any"; formats (date, email, uri, ...) a valid sample; numbers a value inside their bounds
(`multipleOf` respected); booleans true. The result is checked with jsonschema; a schema no
value can satisfy (an unmatched pattern, contradictory bounds) raises FillError.

    args = fill_arguments(schema, "Ada Lovelace", ["Ada Lovelace"], random.Random(7))
    # {"query": "Ada Lovelace", "subject_names": ["Ada Lovelace"], "search_scope": "basic"}

`schema_of(row)` reads a tool row's schema once (its parameters, roles and canonical text,
kept by the schema's JSON text); a caller that fills arguments for the same tools again and
again (synthesis: several calls a trajectory) passes it instead of the parameters.
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

import fastjsonschema
import jsonschema

from generators.tools.base import canonical, parameters_of

LOOKUP_NAMES = ("query", "q", "keyword", "keywords", "search", "search_query", "search_term", "question",
                "term", "text", "prompt", "topic")
NAME_TOKENS = {"name", "names", "entity", "entities", "individual", "individuals", "person", "persons", "people",
               "subject", "subjects", "figure", "figures", "alias", "aliases", "title", "titles"}
FORMATS = {"date": "2000-01-01", "date-time": "2000-01-01T00:00:00Z", "time": "12:00:00Z", "email": "info@example.org",
           "uri": "https://example.org", "url": "https://example.org", "hostname": "example.org",
           "ipv4": "192.0.2.1", "ipv6": "2001:db8::1", "uuid": "00000000-0000-4000-8000-000000000000"}
FALLBACK = "any"
_QUOTED = re.compile(r"['‘“「\"]([^'’”」\"\n]{1,40})['’”」\"]")
_MAX_DEPTH = 8


class FillError(ValueError):
    """No schema-valid arguments could be made for a tool."""


@dataclass(frozen=True)
class Roles:
    lookup: str | None
    names: tuple[str, ...]
    k: str | None


def _type(spec: Any) -> str | None:
    t = spec.get("type") if isinstance(spec, dict) else None
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), None)
    return t


def _plain_string(spec: Any) -> bool:
    return _type(spec) == "string" and not {"enum", "const", "format", "pattern"} & set(spec)


def _name_like(prop: str, spec: Any) -> bool:
    if not set(re.split(r"[_\-\s]+", prop.lower())) & NAME_TOKENS:
        return False
    if _type(spec) == "array":
        items = spec.get("items", {})
        return items in (True, {}) or _plain_string(items)
    return _plain_string(spec)


def roles_of(parameters: dict) -> Roles:
    """The lookup, name and k arguments of a tool (see the module docstring)."""
    props = parameters.get("properties") if isinstance(parameters, dict) else None
    props = props if isinstance(props, dict) else {}
    required = [r for r in parameters.get("required") or [] if r in props] if props else []
    strings = [p for p, s in props.items() if _plain_string(s) and not _name_like(p, s)]
    lookup = ("query" if "query" in strings else
              next((p for p in strings if p.lower() in LOOKUP_NAMES), None) or
              next((p for p in required if p in strings), None) or next(iter(strings), None))
    names = tuple(p for p, s in props.items() if p != lookup and _name_like(p, s))
    k = "top_k" if _type(props.get("top_k")) == "integer" else None
    return Roles(lookup, names, k)


@dataclass(frozen=True)
class Schema:
    """A tool's parameters read once: the schema, its roles and its canonical JSON text (the
    key of its compiled checks). Shared: nothing may change `parameters`."""

    parameters: dict
    roles: Roles
    key: str


def _read(params: dict) -> Schema:
    return Schema(params, roles_of(params), canonical(params))


@lru_cache(maxsize=4096)
def _schema(json_schema: str) -> Schema:
    return _read(json.loads(json_schema))


def schema_of(row: dict) -> Schema:
    """The Schema of a tool row: kept by its `json_schema` text, else read as
    generators.tools.base.parameters_of reads the row."""
    text = row.get("json_schema")
    return _schema(text) if isinstance(text, str) else _read(parameters_of(row))


@lru_cache(maxsize=4096)
def _examples(description: str) -> tuple[str, ...]:
    return tuple(m.strip() for m in _QUOTED.findall(description) if m.strip())


class _Filler:
    def __init__(self, root: dict, lookup: str, names: Sequence[str], rng: random.Random):
        self.root, self.lookup, self.rng = root, lookup, rng
        self.names = list(dict.fromkeys(n for n in names if n)) or [lookup]

    def resolve(self, spec: Any) -> Any:
        ref = spec.get("$ref") if isinstance(spec, dict) else None
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return spec
        target: Any = self.root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        if target is None:
            raise FillError(f"cannot resolve $ref {ref}")
        return {**target, **{k: v for k, v in spec.items() if k != "$ref"}}

    def value(self, spec: Any, prop: str = "", role: str | None = None, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH:
            raise FillError(f"{prop or 'schema'}: nested too deeply")
        spec = self.resolve(spec)
        if not isinstance(spec, dict):
            return self.string({}, prop, role)
        if "const" in spec:  # (a copy: the schema may be shared, Schema)
            return copy.deepcopy(spec["const"])
        if spec.get("enum"):
            return copy.deepcopy(self.rng.choice(list(spec["enum"])))
        for key in ("anyOf", "oneOf"):
            if isinstance(spec.get(key), list) and spec[key]:
                options = [s for s in spec[key] if _type(self.resolve(s)) != "null"] or spec[key]
                return self.value(options[0], prop, role, depth + 1)
        if isinstance(spec.get("allOf"), list):
            merged = {k: v for k, v in spec.items() if k != "allOf"}
            for s in spec["allOf"]:
                merged.update(self.resolve(s) if isinstance(s, dict) else {})
            return self.value(merged, prop, role, depth + 1)
        t = _type(spec) or ("object" if "properties" in spec else "array" if "items" in spec else "string")
        if t == "object":
            return self.object(spec, depth)
        if t == "array":
            return self.array(spec, prop, role, depth)
        if t in ("integer", "number"):
            return self.number(spec, prop, t)
        if t == "boolean":
            return True
        if t == "null":
            return None
        return self.string(spec, prop, role)

    def object(self, spec: dict, depth: int, roles: dict | None = None) -> dict:
        """Required properties (and `roles`' keys), plus more in order up to minProperties."""
        roles = roles or {}
        props = spec.get("properties") if isinstance(spec.get("properties"), dict) else {}
        required = [r for r in spec.get("required") or [] if isinstance(r, str)]
        keys = list(dict.fromkeys([p for p in props if p in required or p in roles] + required))
        keys += [p for p in props if p not in keys][:max(0, int(spec.get("minProperties", 0)) - len(keys))]
        return {k: self.value(props.get(k, {}), k, roles.get(k), depth + 1) for k in keys}

    def array(self, spec: dict, prop: str, role: str | None, depth: int) -> list:
        lo, hi = int(spec.get("minItems", 0)), spec.get("maxItems")
        unique = bool(spec.get("uniqueItems"))
        if role == "names":
            out = list(self.names)
        else:
            prefix = spec.get("prefixItems") if isinstance(spec.get("prefixItems"), list) else []
            examples = _examples(str(spec.get("description") or ""))
            out = []
            for i in range(max(lo, 1) if hi is None else min(max(lo, 1), int(hi))):
                sub = self.resolve(prefix[i] if i < len(prefix) else spec.get("items", {}))
                v = examples[i] if _plain_string(sub) and i < len(examples) else self.value(sub, prop, None, depth + 1)
                out.append(f"{v} {i + 1}" if unique and isinstance(v, str) and v in out else v)
        while out and len(out) < lo:
            out.append(f"{out[-1]} {len(out) + 1}" if unique and isinstance(out[-1], str) else out[-1])
        return out[:int(hi)] if hi is not None else out

    def number(self, spec: dict, prop: str, t: str) -> int | float:
        def bound(key: str, default: float) -> float:
            x = spec.get(key, default)
            return x if isinstance(x, (int, float)) and not isinstance(x, bool) else default

        gap = 1 if t == "integer" else 1e-6
        lo = max(bound("minimum", -math.inf), bound("exclusiveMinimum", -math.inf) + gap)
        hi = min(bound("maximum", math.inf), bound("exclusiveMaximum", math.inf) - gap)
        want = 2000 if "year" in prop.lower() else 5 if prop == "top_k" else 1
        for x in (spec.get("default"), *(spec.get("examples") or [])):
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                want = x
                break
        v = min(max(want, lo), hi)
        step = spec.get("multipleOf")
        if isinstance(step, (int, float)) and step > 0:
            v = math.ceil(v / step) * step
        if t == "integer":
            v = math.ceil(v)
        if not lo <= v <= hi:
            raise FillError(f"{prop}: no {t} fits minimum/maximum/multipleOf")
        return int(v) if float(v).is_integer() else v

    def string(self, spec: dict, prop: str, role: str | None) -> str:
        if role == "lookup":
            candidates = [self.lookup]
        elif role == "names":
            candidates = [self.names[0]]
        elif spec.get("format") in FORMATS:
            candidates = [FORMATS[spec["format"]]]
        else:
            candidates = [*_examples(str(spec.get("description") or "")),
                          *[x for x in (*(spec.get("examples") or []), spec.get("default")) if isinstance(x, str)],
                          FALLBACK, self.lookup]
        pattern = spec.get("pattern")
        if isinstance(pattern, str):
            fits = [c for c in candidates if re.search(pattern, c)]
            if not fits:
                raise FillError(f"{prop}: no value found that matches the pattern {pattern!r}")
            candidates = fits
        v = candidates[0]
        lo, hi = int(spec.get("minLength", 0)), spec.get("maxLength")
        if len(v) < lo:
            v = v + "_" * (lo - len(v))
        return v[:int(hi)] if hi is not None else v


@lru_cache(maxsize=1024)
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@lru_cache(maxsize=1024)
def _fast(schema_json: str):
    """The schema compiled by fastjsonschema, for a schema without formats (whose checks differ
    from jsonschema's); else None."""
    if '"format"' in schema_json:
        return None
    try:
        return fastjsonschema.compile(json.loads(schema_json))
    except Exception:  # noqa: BLE001 (jsonschema alone then)
        return None


def check_arguments(parameters: dict | Schema, arguments: Any) -> str | None:
    """None when `arguments` satisfy `parameters` (formats checked too), else the best error.
    Arguments that the compiled schema accepts pass at once; jsonschema decides the others."""
    key = parameters.key if isinstance(parameters, Schema) else canonical(parameters)
    fast = _fast(key)
    if fast is not None:
        try:
            fast(arguments)
            return None
        except Exception:  # noqa: BLE001 (jsonschema decides, below)
            pass
    err = jsonschema.exceptions.best_match(_validator(key).iter_errors(arguments))
    if err is None:
        return None
    where = "/".join(str(p) for p in err.absolute_path)
    return f"{where}: {err.message}" if where else err.message


def fill_arguments(parameters: dict | Schema, lookup: str, names: Sequence[str], rng: random.Random) -> dict:
    """Schema-valid arguments: the lookup, the entity names and every required argument."""
    schema = parameters if isinstance(parameters, Schema) else None
    parameters = schema.parameters if schema else parameters
    roles = schema.roles if schema else roles_of(parameters)
    role = {n: "names" for n in roles.names}
    if roles.lookup:
        role[roles.lookup] = "lookup"
    args = _Filler(parameters, lookup, names, rng).object(parameters, 0, role)
    err = check_arguments(schema or parameters, args)
    if err:
        raise FillError(err)
    return args

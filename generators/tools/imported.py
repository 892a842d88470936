"""Bring your own tools: OpenAI function-calling tools from a JSON Lines file join the bank.

Each line is one tool, `{"name", "description", "parameters"}` (ToolForge's tool-bank
format) or the wrapped `{"type": "function", "function": {...}}`. An accepted tool becomes a
`tools` row like the base tools and their variants: its domain (default `general`),
`variant_of` = the tool_id of that domain's base tool, whose search it uses, and
meta `{"source": "import"}`. Rows are content hashes and go to the run `tools-import` of
the dataset, so importing the same tools again writes nothing twice; synthesis of the
dataset offers and calls them beside the base bank (`imported_rows`).

How an imported tool is answered (generators.tools.simulator): like its domain's base tool,
over the same documents, with the lookup argument (generators.tools.fill.roles_of: `query`
or the query-like string argument) plus the values of its name arguments as the BM25
query; its other arguments are checked against its schema and otherwise ignored.

A bad line is skipped and reported as (line number, reason): invalid JSON, not an object,
no name, a name that is not a function name, a description that is not a string,
parameters that are not a valid JSON Schema (jsonschema's metaschema check) of type
object, no string argument to carry the lookup, arguments that cannot be filled, a name
used twice in the file or already used by another tool of the bank.

    report = import_file(Path("person_information_search.jsonl"), "data", "demo", domain="person")
    report.problems     # [(3, "invalid JSON: Expecting ',' delimiter (column 41)"), ...]
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import fastjsonschema
import jsonschema

from generators.tools.base import DOMAINS, GENERAL, base_rows, make_row, tool_id
from generators.tools.fill import FillError, fill_arguments, roles_of

SOURCE = "import"
RUN_ID = "tools-import"
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")  # OpenAI's function names, letter or _ first


@dataclass
class ImportReport:
    """What an import read: new rows, tools already in the bank, skipped lines."""

    rows: list[dict] = field(default_factory=list, metadata={"help": "new `tools` rows"})
    present: list[str] = field(default_factory=list, metadata={"help": "names of tools already imported as they are"})
    problems: list[tuple[int, str]] = field(default_factory=list,
                                            metadata={"help": "(line number, reason) per skipped line"})
    lines: int = field(default=0, metadata={"help": "non-blank lines read"})
    written: int = field(default=0, metadata={"help": "rows committed to the dataset"})


def is_imported(row: dict) -> bool:
    """Whether a `tools` row came from `forgeplay tools import`."""
    meta = row.get("meta")
    try:
        meta = json.loads(meta) if isinstance(meta, str) else meta
    except ValueError:
        return False
    return isinstance(meta, dict) and meta.get("source") == SOURCE


def imported_rows(rows: Iterable[dict]) -> list[dict]:
    """The imported tools among a dataset's `tools` rows, content columns only, one per tool_id."""
    keep = ("tool_id", "domain", "name", "description", "json_schema", "variant_of", "meta")
    out = {r["tool_id"]: {k: r.get(k) for k in keep} for r in rows if is_imported(r)}
    return [out[k] for k in sorted(out)]


def _schema_error(params: dict) -> str | None:
    cls = jsonschema.validators.validator_for(params, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(params)
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path)
        return f"invalid JSON Schema{' at ' + where if where else ''}: {e.message}"
    try:  # the rules layer checks calls with fastjsonschema: a schema it cannot compile would fail every row
        fastjsonschema.compile({k: v for k, v in params.items() if k != "$schema"})
    except (fastjsonschema.JsonSchemaDefinitionException, ValueError, TypeError) as e:
        return f"JSON Schema not supported by the validator: {str(e)[:120]}"
    if params.get("type") != "object":
        return "parameters must be a JSON Schema of type 'object'"
    return None


def parse_tool(text: str) -> tuple[dict | None, str | None]:
    """One line -> ({"name", "description", "parameters"}, None) or (None, reason)."""
    try:
        obj = json.loads(text.strip())
    except json.JSONDecodeError as e:
        return None, f"invalid JSON: {e.msg} (column {e.colno})"
    if isinstance(obj, dict) and obj.get("type") == "function" and isinstance(obj.get("function"), dict):
        obj = obj["function"]
    if not isinstance(obj, dict):
        return None, f"not a JSON object (a {type(obj).__name__})"
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, "no name"
    if not NAME_RE.match(name):
        return None, f"name {name!r} is not a function name (a letter or _, then letters, digits, _ or -; at most 64)"
    description = obj.get("description", "")
    if not isinstance(description, str):
        return None, f"{name}: description must be a string"
    params = obj.get("parameters")
    if not isinstance(params, dict):
        return None, f"{name}: parameters must be a JSON Schema object"
    err = _schema_error(params)
    if err:
        return None, f"{name}: {err}"
    if roles_of(params).lookup is None:
        return None, f"{name}: no string argument to carry the lookup"
    try:
        fill_arguments(params, "Example", ["Example"], random.Random(0))
    except FillError as e:
        return None, f"{name}: cannot fill its arguments: {e}"
    return {"name": name, "description": description, "parameters": params}, None


def read_tools(lines: Iterable[str], domain: str = GENERAL, bank: dict[str, str] | None = None) -> ImportReport:
    """Parse JSON Lines of tools against `bank` ({name: tool_id} of the tools already there;
    the base tools are always there). Rows for new tools; present/problems for the rest."""
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {', '.join(DOMAINS)}, not {domain!r}")
    base = base_rows()
    taken = {r["name"]: r["tool_id"] for r in base} | dict(bank or {})
    base_id = next(r["tool_id"] for r in base if r["domain"] == domain)
    first_line: dict[str, int] = {}
    report = ImportReport()
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        report.lines += 1
        tool, reason = parse_tool(text)
        if tool is None:
            report.problems.append((n, reason))
            continue
        name = tool["name"]
        if name in first_line:
            report.problems.append((n, f"duplicate name {name!r} (first on line {first_line[name]})"))
            continue
        first_line[name] = n
        tid = tool_id(domain, name, tool["description"], tool["parameters"])
        if taken.get(name) == tid:
            report.present.append(name)
        elif name in taken:
            report.problems.append((n, f"duplicate name {name!r}: a tool of the bank already has it"))
        else:
            report.rows.append(make_row(domain, name, tool["description"], tool["parameters"], base_id,
                                        {"source": SOURCE}))
    return report


def import_file(path: Path, root, dataset: str, domain: str = GENERAL) -> ImportReport:
    """Read `path` (JSON Lines, UTF-8) and commit its new tools to `dataset`'s `tools`."""
    from storage import load_table, write_rows

    existing = load_table(dataset, "tools", root, columns=["name", "tool_id"]).to_pylist()
    with open(path, encoding="utf-8-sig") as f:  # a byte-order mark is not part of line 1
        report = read_tools(f, domain, {r["name"]: r["tool_id"] for r in existing})
    if report.rows:
        entries = write_rows(root, dataset, "tools", RUN_ID, report.rows)
        report.written = sum(e.rows for e in entries)
    return report

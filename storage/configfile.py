"""Config files (YAML or JSON) checked whole against a JSON Schema before anything runs, with
one error line naming the file and the field at fault. `forgeplay serve --config` (flows/
schedules.py) and `forgeplay run --config` (flows/loop_config.py) read their files here.

    doc = read("pipeline.yaml")                      # ConfigFileError "pipeline.yaml: line 3: not YAML (...)"
    check(doc, schema)                               # ConfigFileError "sft.max_stepz: unknown field (...)"
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import jsonschema
import yaml


class ConfigFileError(ValueError):
    """A malformed config file; the message is one line naming the field."""


def read(path: str | Path):
    """The parsed document of a YAML or JSON file (JSON is YAML); ConfigFileError when the
    file cannot be read or parsed."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigFileError(f"{path}: cannot read it ({e.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark else ""
        raise ConfigFileError(f"{path}: {line}not YAML ({getattr(e, 'problem', None) or e})") from None


def where(path) -> str:
    """A JSON path as the user reads it: schedules[1].parameters.n."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def explain(err: jsonschema.ValidationError, unknown: Callable[[list, str], str | None] | None = None
            ) -> tuple[list, str]:
    """(path of the field at fault, message) of a schema error; `unknown(path, field)` words
    the message of a field the schema does not know (None or no hook: the fields it expects)."""
    path = list(err.absolute_path)
    if err.validator == "required":
        missing = next(k for k in err.validator_value if k not in err.instance)
        return path + [missing], "missing (required)"
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))[0]
        message = unknown(path, extra) if unknown else None
        return path + [extra], message or f"unknown field (expected one of: {', '.join(err.schema['properties'])})"
    return path, err.message


def check(doc, schema: dict, unknown: Callable[[list, str], str | None] | None = None) -> None:
    """ConfigFileError "<field>: <what is wrong>" for the most relevant schema error of `doc`."""
    err = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(doc))
    if err is not None:
        path, msg = explain(err, unknown)
        raise ConfigFileError(f"{where(path)}: {msg}")

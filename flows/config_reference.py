"""The reference of `forgeplay run --config`: the loop config's JSON Schema with each option's
default (what `forgeplay run --print-config-schema` prints) and the Markdown page made from it,
docs/loop-config.md. tests/flows/test_config_reference.py fails when the page is out of date;
it is rewritten with

    python -m flows.config_reference docs/loop-config.md

A default is the loop's own (flows/loop_stages.py, sized for two cores) where it sets one,
else the stage command's.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from flows.loop_config import file_schema
from flows.loop_stages import sections, stage_names

TOP_DEFAULTS = {"dataset": "demo", "model": None, "tool_style": "compact", "skip": []}


def _defaults(name: str) -> dict:
    """Section `name`'s defaults: its configs' own, then the loop's."""
    out = {}
    sec = sections()[name]
    for cls in sec.configs:
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out.setdefault(f.name, f.default)
            elif f.default_factory is not dataclasses.MISSING:
                out.setdefault(f.name, f.default_factory())
    return {**out, **sec.defaults}


def schema() -> dict:
    """The loop config file's JSON Schema (flows/loop_config.py checks files against it), with
    a description of each section and the default of each option."""
    doc = file_schema()
    for key, default in TOP_DEFAULTS.items():
        doc["properties"][key]["default"] = default
    for name, sec in sections().items():
        section, defaults = doc["properties"][name], _defaults(name)
        wired = f"; the loop sets {', '.join(sec.wired)}" if sec.wired else ""
        section["description"] = f"options of {sec.command}, named without dashes{wired}"
        for key, prop in section["properties"].items():
            if key in defaults:
                prop["default"] = defaults[key]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "forgeplay run --config", **doc}


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")


def _type(prop: dict) -> str:
    if "enum" in prop:
        return " or ".join(json.dumps(v) for v in prop["enum"])
    kinds = prop.get("type", "any")
    return " or ".join(kinds) if isinstance(kinds, list) else kinds


def markdown(doc: dict | None = None) -> str:
    """docs/loop-config.md: the top-level settings, then a table per section, in stage order."""
    doc = doc or schema()
    props, secs = doc["properties"], sections()
    lines = ["# `forgeplay run --config`: every option", "",
             "Generated from `forgeplay run --print-config-schema` by `python -m flows.config_reference "
             "docs/loop-config.md`; `tests/flows/test_config_reference.py` fails when it is out of date. A YAML or "
             "JSON file sets any of these; an option left out takes the default shown (the loop's own where it "
             f"sets one, sized for two cores, else the command's). The stages run in this order: {', '.join(stage_names())}.",
             "", "## Top level", "", "| key | type | default | what it is |", "|---|---|---|---|"]
    lines += [f"| `{k}` | {_cell(_type(p))} | `{json.dumps(p.get('default'), default=str)}` | {_cell(p.get('description', ''))} |"
              for k, p in props.items() if k not in secs]
    for name in secs:
        section = props[name]
        lines += ["", f"## `{name}`", "", _cell(section["description"][0].upper() + section["description"][1:]) + ".",
                  "", "| option | type | default | what it does |", "|---|---|---|---|"]
        for k, p in section["properties"].items():
            default = f"`{json.dumps(p['default'], default=str)}`" if "default" in p else ""
            lines.append(f"| `{k}` | {_cell(_type(p))} | {_cell(default)} | {_cell(p.get('description', ''))} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = markdown()
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text)
    else:
        sys.stdout.write(text)

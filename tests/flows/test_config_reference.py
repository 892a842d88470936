"""The loop config's reference stays true: `forgeplay run --print-config-schema` prints the
schema the loop checks files against (with defaults), docs/loop-config.md is the page made from
it, README's loop config section names every top-level key and section of it and its example
file passes the loop's checks, and every link in README.md points at a file of the repository."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import yaml
from typer.testing import CliRunner

from flows import loop_config
from flows.cli import app
from flows.config_reference import markdown, schema

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def section(text: str, heading: str) -> str:
    """The text under `heading` up to the next heading of the same level."""
    level = heading.split(" ")[0]
    start = text.index(heading + "\n")
    end = text.find(f"\n{level} ", start + len(heading))
    return text[start:end if end >= 0 else None]


def test_print_config_schema_is_the_schema_files_are_checked_against():
    res = CliRunner().invoke(app, ["run", "--print-config-schema"])
    assert res.exit_code == 0, res.output
    printed = json.loads(res.output)
    assert printed == json.loads(json.dumps(schema(), default=str))
    checked = loop_config.file_schema()
    assert printed["properties"].keys() == checked["properties"].keys()
    for name, prop in checked["properties"].items():  # the same options, each with a default where one exists
        assert printed["properties"][name].get("properties", {}).keys() == prop.get("properties", {}).keys()
    assert printed["properties"]["sft"]["properties"]["max_steps"]["default"] == 6  # the loop's own default
    assert printed["properties"]["sft"]["properties"]["keep_checkpoints"]["default"] is False  # the command's
    resolved = loop_config.check({})  # every default is a value the schema accepts
    jsonschema.validate({k: v for k, v in resolved.items()}, printed)


def test_docs_page_is_made_from_the_schema():
    page = (REPO / "docs" / "loop-config.md").read_text()
    assert page == markdown(), "docs/loop-config.md is out of date: python -m flows.config_reference docs/loop-config.md"
    for name, prop in schema()["properties"].items():
        assert f"`{name}`" in page
        for option in prop.get("properties", {}):
            assert f"| `{option}` |" in page


def test_readme_config_section_names_every_top_level_key_and_its_example_passes():
    text = section(README, "## The loop config")
    missing = [k for k in schema()["properties"] if f"`{k}`" not in text]
    assert not missing, f"README's loop config section does not name {missing}"
    assert "](docs/loop-config.md)" in text and "--print-config-schema" in text
    example = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    resolved = loop_config.check(yaml.safe_load(example))  # raises ConfigFileError naming a bad field
    assert resolved["sft"]["keep_checkpoints"] is True and resolved["synthesize"]["n"] == 500


def test_readme_links_point_at_files_of_the_repository():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    assert links
    for link in links:
        assert not re.match(r"[a-z]+://", link), f"README links outside the repository: {link}"
        assert (REPO / link).exists(), f"README links to {link}, which is not in the repository"
    for path in (REPO / "experiments" / "README.md", *sorted((REPO / "experiments" / "results").glob("*.md"))):
        for link in re.findall(r"\]\(([^)#\s]+)\)", path.read_text()):
            assert (path.parent / link).exists() or link == "results/bench_scale.md", f"{path.name} -> {link}"

"""Which tool bank a command offers (`--tools`): the built-in world's (base tools and their
gated paraphrases, generators/tools/bank.py), the corpus's own (generators/tools/corpus_bank.py),
or the tools of a JSON Lines file in `forgeplay tools import`'s format (generators/tools/imported.py:
each a general search, answered with its lookup argument).

    choice = resolve_choice("auto", sources)   # "corpus" for an imported corpus, "world" for the world
    rows = file_bank(Path("my_tools.jsonl"))   # ValueError "--tools my_tools.jsonl line 3: ..."
    rows = bank_rows("auto", documents, world=lambda: build_bank(0, 1))   # what train grpo offers
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable

from generators.tools.base import GENERAL, base_rows

CHOICES = ("auto", "world", "corpus")
HELP = ("the tool bank: world (the built-in world's tools and their paraphrased variants), corpus (a general "
        "search plus one search per kind of document the corpus shows: its kind/category column, else clusters "
        "of its passages), or a JSON Lines file of tools (`forgeplay tools import`'s format, each a general "
        "search); auto: corpus for an imported corpus, world for the built-in world")


def check_option(value: str) -> None:
    """A one-line ValueError when `--tools` is neither a choice nor a readable tools file."""
    if value in CHOICES:
        return
    if not value.endswith((".jsonl", ".json")):
        raise ValueError(f"--tools must be one of {', '.join(CHOICES)} or a .jsonl file of tools, not {value!r}")
    file_bank(Path(value))


def resolve_choice(value: str, sources: Iterable[str]) -> str:
    """`value`, with auto made world when every document is the built-in world's
    (source `world:...`), else corpus."""
    if value != "auto":
        return value
    return "world" if all(str(s).startswith("world:") for s in sources) else "corpus"


def file_bank(path: Path) -> list[dict]:
    """The general search plus the tools of `path`; ValueError naming the first bad line."""
    from generators.tools.imported import read_tools

    try:
        with open(path, encoding="utf-8-sig") as f:
            report = read_tools(f, GENERAL)
    except OSError as e:
        raise ValueError(f"--tools {path} cannot be read: {e.strerror}") from None
    if report.problems:
        line, reason = report.problems[0]
        raise ValueError(f"--tools {path} line {line}: {reason}")
    if not report.rows:
        raise ValueError(f"--tools {path} holds no tool (one {{name, description, parameters}} a line)")
    return [next(r for r in base_rows() if r["domain"] == GENERAL)] + report.rows


def bank_rows(option: str, documents: list[dict], world) -> list[dict]:
    """The rows of the bank `option` names for `documents` (rows with `source`); `world()`
    makes the world's bank (each command its own: gated variants, or none). The corpus bank
    is clustered with its default seed: every run of a dataset offers the same corpus tools,
    so one simulator replays them all."""
    from generators.tools.corpus_bank import corpus_bank

    check_option(option)
    choice = resolve_choice(option, {d.get("source") or "" for d in documents})
    if choice == "world":
        return world()
    return corpus_bank(documents) if choice == "corpus" else file_bank(Path(choice))


def choice_key(choice: str) -> str:
    """What a run id keeps of the bank choice: the name, or a file's content hash."""
    if choice in CHOICES:
        return choice
    return "file:" + hashlib.sha256(Path(choice).read_bytes()).hexdigest()[:16]

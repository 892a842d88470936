"""The worker package of a verl export: forgeplay's reward, tool adapter, BM25 simulator and
objectives (train/verl_objective.py: verl advantage estimators), copied into `DIR/forgeplay_verl/` so that a verl worker runs them without forgeplay installed.

    write_package(out, documents, tool_rows)   # DIR/forgeplay_verl/: the modules and corpus/
    write_tool_config(out, tools)              # DIR/tool_config.yaml
    write_reward(out)                          # DIR/reward.py

The copied modules are the import closure of ENTRIES inside this repository (found with `ast`,
so a new import in the simulator is carried along; imports inside functions are rewritten but
not followed: they run only when called), each under `forgeplay_verl.<its module
name>` with its project imports rewritten to that prefix; a package of the closure that no
module imports by name gets an empty `__init__.py`. What they import from outside the
repository must be the standard library or WORKER_DEPS; `requirements()` names the pip packages
a worker needs beside verl (with the versions of this environment, which give byte-identical
tool results). The reward's closure is standard library only (checked here, and by the tests
under `python -S`).

`DIR/reward.py` is the file verl loads by path (`reward.custom_reward_function.path`): it puts
DIR on sys.path and re-exports `compute_score`. `DIR/tool_config.yaml` declares one
`SimulatorTool` per tool name (JSON text, which YAML reads). The corpus (documents.parquet,
tools.jsonl) goes inside the package, so shipping the package ships it.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import re
import sys
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from storage.files import atomic_path, write_text

PACKAGE = "forgeplay_verl"
REWARD_ENTRY = "train.reward"
TOOL_ENTRY = "train.verl_tool"
OBJECTIVE_ENTRY = "train.verl_objective"
ENTRIES = (REWARD_ENTRY, TOOL_ENTRY, OBJECTIVE_ENTRY)
OBJECTIVE_MODULE = f"{PACKAGE}.{OBJECTIVE_ENTRY}"  # VERL_USE_EXTERNAL_MODULES: registers the estimators
TOOL_CLASS = f"{PACKAGE}.{TOOL_ENTRY}.SimulatorTool"
PROJECT = ("flows", "selfplay", "acquire", "train", "validators", "generators", "storage")
# what the copied modules may import besides the standard library: verl brings verl, torch, numpy
# and pyarrow; the others are installed beside it (requirements())
WORKER_DEPS = {"verl": None, "torch": None, "numpy": None, "pyarrow": None, "bm25s": "bm25s",
               "jsonschema": "jsonschema", "fastjsonschema": "fastjsonschema"}
REPO = Path(__file__).resolve().parents[1]

_REWARD_SHIM = '''"""forgeplay's answer reward for verl: reward.custom_reward_function.path=<this file>,
reward.custom_reward_function.name=compute_score. Standard library only; the code is in the
forgeplay_verl package beside this file (a copy of forgeplay's train/reward.py)."""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from {package}.{entry} import compute_score  # noqa: E402,F401
'''


def _file(module: str) -> Path | None:
    base = REPO.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _top(module: str) -> str:
    return module.split(".")[0]


def _nodes(tree: ast.AST, everywhere: bool):
    """The import statements of a module: all of them, or those that run when it is imported
    (module and class bodies, not function bodies)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif everywhere or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _nodes(node, everywhere)


def _imports(path: Path, everywhere: bool = False) -> list[tuple[int, int, str, list[str]]]:
    """(first line, last line, module, imported names) of the absolute imports in `path`."""
    out = []
    for node in _nodes(ast.parse(path.read_text(), str(path)), everywhere):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _top(a.name) in PROJECT and a.asname is None and "." in a.name:
                    raise ValueError(f"{path}: `import {a.name}` without `as` cannot be copied into {PACKAGE}")
                out.append((node.lineno, node.end_lineno, a.name, []))
        elif node.level == 0 and node.module:
            out.append((node.lineno, node.end_lineno, node.module, [a.name for a in node.names]))
        else:
            raise ValueError(f"{path}: relative imports cannot be copied into {PACKAGE}")
    return out


def closure(entries=ENTRIES) -> tuple[dict[str, Path], set[str]]:
    """({module: file} of the repository modules `entries` import, directly or not; the
    top-level names of everything else they import)."""
    todo, found, external = list(entries), {}, set()
    while todo:
        mod = todo.pop()
        if mod in found:
            continue
        path = _file(mod)
        if path is None:
            raise ValueError(f"no module {mod!r} in {REPO}")
        found[mod] = path
        for _, _, name, names in _imports(path):
            if _top(name) not in PROJECT:
                external.add(_top(name))
                continue
            subs = [f"{name}.{n}" for n in names if _file(f"{name}.{n}") is not None]
            if len(subs) < len(names) or not names:
                todo.append(name)  # a module, or a package whose __init__ defines what is imported
            todo += subs
    return found, external - set(sys.stdlib_module_names) - {"__future__"}


def _rewrite(path: Path) -> str:
    lines = path.read_text().splitlines(keepends=True)
    pattern = re.compile(r"\b(from|import)(\s+)(" + "|".join(PROJECT) + r")\b")
    for first, last, name, _ in _imports(path, everywhere=True):
        if _top(name) in PROJECT:
            for i in range(first - 1, last):
                lines[i] = pattern.sub(rf"\1\2{PACKAGE}.\3", lines[i], count=1)
    return "".join(lines)


def requirements(entries=ENTRIES) -> list[str]:
    """pip requirement strings (pinned to this environment) that the copied modules need besides verl's."""
    _, external = closure(entries)
    unknown = sorted(external - set(WORKER_DEPS))
    if unknown:
        raise ValueError(f"the verl worker package would import {', '.join(unknown)}; add them to WORKER_DEPS "
                         "(and to .ci/verl_env.sh) or keep them out of the modules it copies")
    return sorted(f"{WORKER_DEPS[m]}=={md.version(WORKER_DEPS[m])}" for m in external if WORKER_DEPS[m])


def write_package(out: Path, documents: pa.Table | Iterable[pa.Table] | None = None,
                  tool_rows: list[dict] = ()) -> list[str]:
    """out/PACKAGE (replaced whole): the closure of ENTRIES and, given documents (a table, or
    tables written one after the other: memory holds one), corpus/{documents.parquet,
    tools.jsonl} for the simulator. Returns the copied module names."""
    modules, _ = closure()
    reward_deps = closure((REWARD_ENTRY,))[1]
    if reward_deps:
        raise ValueError(f"{REWARD_ENTRY} must import only the standard library, but imports {sorted(reward_deps)}")
    requirements()
    files = {("__init__.py",): f'"""forgeplay\'s verl reward and tool adapter: a copy written by `forgeplay export '
                               f'verl`, do not edit. Modules: {", ".join(sorted(modules))}."""\n'}
    for mod, path in modules.items():
        parts = tuple(mod.split("."))
        for i in range(1, len(parts)):
            files.setdefault(parts[:i] + ("__init__.py",), "")
        name = parts + ("__init__.py",) if path.name == "__init__.py" else parts[:-1] + (parts[-1] + ".py",)
        files[name] = _rewrite(path)
    with atomic_path(out / PACKAGE, folder=True) as tmp:
        for name, text in files.items():
            tmp.joinpath(*name).parent.mkdir(parents=True, exist_ok=True)
            tmp.joinpath(*name).write_text(text)
        if documents is not None:
            (tmp / "corpus").mkdir()
            writer = None
            for table in [documents] if isinstance(documents, pa.Table) else documents:
                table = table.select([c for c in ("doc_id", "title", "text", "meta") if c in table.schema.names])
                writer = writer or pq.ParquetWriter(tmp / "corpus" / "documents.parquet", table.schema)
                writer.write_table(table)
            if writer is not None:
                writer.close()
            (tmp / "corpus" / "tools.jsonl").write_text(
                "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in tool_rows))
    return sorted(modules)


def write_tool_config(out: Path, tools: list[dict]) -> Path:
    """out/tool_config.yaml: one SimulatorTool per OpenAI function dict in `tools`."""
    config = {"tools": [{"class_name": TOOL_CLASS, "config": {"type": "native", "corpus": "corpus"},
                         "tool_schema": t} for t in tools]}
    return write_text(out / "tool_config.yaml", "# verl tool config (actor_rollout_ref.rollout.multi_turn.tool_config_path), written by "
                             "forgeplay export verl --tool-agent.\n# JSON is YAML; `corpus` is relative to the "
                             f"{PACKAGE} package folder.\n" + json.dumps(config, indent=1, ensure_ascii=False) + "\n")


def write_reward(out: Path) -> Path:
    """out/reward.py, the file verl's custom reward loader reads (see the module docstring)."""
    return write_text(out / "reward.py", _REWARD_SHIM.format(package=PACKAGE, entry=REWARD_ENTRY))

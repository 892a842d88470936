"""The config of `forgeplay run`, the whole loop (flows/run.py): a few top-level settings and
one section per stage (flows/loop_stages.py declares each), each section the stage command's
own options named without dashes (`forgeplay sft`'s are `forgeplay train sft --help`'s, and so
on). Unset options take the loop's defaults (flows/loop_stages.py, sized so `make run` ends in
minutes on two cores), then the command's.
The options that wire stages together (which dataset a stage reads, which model it starts
from, where it writes) are the loop's: setting one in a section is refused.

    dataset: demo                 # the world dataset every producer writes beside
    model: null                   # the base model (default: the embedded SmolLM2-135M-Instruct)
    tool_style: compact           # tools in every prompt: compact signatures or full JSON schemas
    skip: [selfplay]              # stages left out (flows/loop_stages.py STAGES)
    corpus: {entities: 1000}      # forgeplay corpus world; or {file: my.jsonl} to import a corpus
    synthesize: {n: 64, texts: llm}
    sft: {max_steps: 40, lr: 5e-5}
    grpo: {labels: care, budget: 8, max_steps: 4}

A file is checked whole before anything runs; a bad field is one line naming it
(`pipeline.yaml: sft.max_stepz: unknown field (...)`), and each stage's own checks run too.
"""

from __future__ import annotations

import dataclasses

from flows import loop_stages
from flows.loop_stages import sections
from storage import configfile
from storage.configcli import json_schema
from storage.runs import config_hash


def _top() -> dict:
    """The top-level settings' schemas."""
    return {"dataset": {"type": "string", "description": "the world dataset; the producers write <dataset>_selfplay "
                                                          "and <dataset>_labels beside it"},
            "model": {"type": ["string", "null"], "description": "base model folder or prepared name (default: embedded)"},
            "tool_style": {"enum": ["compact", "full"], "description": "tools in every prompt the loop writes or asks "
                           "(synthesis, evaluation, acquisition, GRPO): compact one-line signatures, about 5x fewer "
                           "tokens than full JSON schemas"},
            "skip": {"type": "array", "items": {"enum": list(loop_stages.stage_names())}, "description": "stages to leave out"}}


def file_schema() -> dict:
    """The JSON Schema of a loop config file: the top-level settings and a section per stage,
    its options the fields of its configs minus those the loop wires."""
    props = _top()
    for name, sec in sections().items():
        schema = json_schema(*sec.configs)
        schema["properties"] = {k: v for k, v in schema["properties"].items() if k not in sec.wired}
        schema["properties"].update(sec.extra)
        props[name] = schema
    return {"type": "object", "additionalProperties": False, "properties": props}


def _unknown(path: list, field: str) -> str | None:
    """A wired option is the loop's to set; other unknown names get the schema's list."""
    secs = sections()
    if len(path) == 1 and path[0] in secs and field in secs[path[0]].wired:
        return f"set by the loop (it wires {', '.join(secs[path[0]].wired)} from the stages before)"
    return None


def renamed(doc: dict) -> dict:
    """`doc` with a section's old option names (a field's `aliases`, e.g. acquire's `p` for
    `label_p`) read as the new ones, each with a one-line note on stderr, for one release."""
    import sys

    for name, sec in sections().items():
        opts = doc.get(name) if isinstance(doc, dict) else None
        if not isinstance(opts, dict):
            continue
        for f in (f for cls in sec.configs for f in dataclasses.fields(cls)):
            for old in (a.replace("-", "_") for a in f.metadata.get("aliases", ())):
                if old != f.name and old in opts and f.name not in opts:
                    opts[f.name] = opts.pop(old)
                    print(f"note: {name}.{old} is deprecated; use {name}.{f.name}", file=sys.stderr)
    return doc


def check(doc: dict) -> dict:
    """`doc` (a parsed config file, or {}) checked whole; the resolved loop config: every
    section's options with the loop's defaults filled in. ConfigFileError naming the field."""
    doc = renamed({} if doc is None else doc)
    configfile.check(doc, file_schema(), _unknown)
    out = {"dataset": doc.get("dataset", "demo"), "model": doc.get("model"), "tool_style": doc.get("tool_style", "compact"),
           "skip": list(doc.get("skip", []))}
    secs = sections()
    for name, sec in secs.items():
        out[name] = {**sec.defaults, **(doc.get(name) or {})}
    for name in secs:  # each stage's own checks (a bad value, not only a bad name)
        try:
            build(out, name, **wiring(name, out, "<run>", policy=out["model"], base=out["model"]))
        except (TypeError, ValueError, KeyError) as e:
            raise configfile.ConfigFileError(f"{name}: {e}") from None
    return out


def check_names(config: dict) -> None:
    """What a resolved loop config names outside itself, checked before the loop starts
    (one-line ValueError): the base model (a model folder or a prepared name), a corpus file
    to import, and the backend section's backend."""
    from pathlib import Path

    from generators.llm.model_store import check_model
    from generators.llm.kinds import CONFIG, require

    check_model(config["model"], "model")
    file = config["corpus"].get("file")
    if file and not Path(file).is_file():
        raise ValueError(f"corpus.file: no such file: {file}")
    backend = config["backend"].get("backend", "transformers")
    require(backend, "backend.backend", CONFIG)


def load(path=None, **top) -> dict:
    """Read and check a loop config file (none: the defaults), top-level settings in `top`
    (e.g. dataset) overriding the file's; ConfigFileError "<file>: <field>: <what is wrong>"."""
    try:
        doc = configfile.read(path) if path else None
        extra = {k: v for k, v in top.items() if v is not None}
        if extra and (doc is None or isinstance(doc, dict)):  # anything else is the schema's to refuse
            doc = {**(doc or {}), **extra}
        return check(doc)
    except configfile.ConfigFileError as e:
        raise configfile.ConfigFileError(f"{path}: {e}" if path else str(e)) from None


def build(config: dict, name: str, **wired) -> list:
    """The config instances of section `name` from the resolved loop config, with the loop's
    wiring `wired` (dataset, model, out, ...) set."""
    opts, out = {**config[name], **wired}, []
    for cls in sections()[name].configs:  # each class takes its own fields (the loop's extras, e.g. file, none)
        names = {f.name for f in dataclasses.fields(cls)}
        out.append(cls(**{k: v for k, v in opts.items() if k in names}))
    for c in out:
        if hasattr(c, "check"):
            c.check()
    return out


def wiring(name: str, config: dict, run_dir, policy: str | None, base: str | None) -> dict:
    """The options of section `name` that the loop sets (its `wire`, flows/loop_stages.py): the
    datasets it reads and writes, the model it starts from (`policy`: the latest trained one;
    `base`: the loop's base model), its run folder `<run_dir>/<name>` and the tool style of its
    prompts; training stages always resume (a rerun continues)."""
    wires = loop_stages.Wires(config["dataset"], f"{run_dir}/{name}", config["tool_style"], policy, base)
    return sections()[name].wire(wires)


def run_id(config: dict) -> str:
    """The loop run's id: a hash of its resolved config (the same config is the same run)."""
    return f"run-{config_hash(config)}"

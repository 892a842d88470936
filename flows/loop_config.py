"""The config of `forgeplay run`, the whole loop (flows/run.py): a few top-level settings and
one section per stage, each section the stage command's own options named without dashes
(`forgeplay sft`'s are `forgeplay train sft --help`'s, and so on). Unset options take the
loop's defaults below (sized so `make run` ends in minutes on two cores), then the command's.
The options that wire stages together (which dataset a stage reads, which model it starts
from, where it writes) are the loop's: setting one in a section is refused.

    dataset: demo                 # the world dataset every producer writes beside
    model: null                   # the base model (default: the embedded SmolLM2-135M-Instruct)
    tool_style: compact           # tools in every prompt: compact signatures or full JSON schemas
    skip: [selfplay]              # stages left out (STAGES)
    corpus: {entities: 1000}      # forgeplay corpus world; or {file: my.jsonl} to import a corpus
    synthesize: {n: 64, texts: llm}
    sft: {max_steps: 40, lr: 5e-5}
    grpo: {labels: care, budget: 8, max_steps: 4}

A file is checked whole before anything runs; a bad field is one line naming it
(`pipeline.yaml: sft.max_stepz: unknown field (...)`), and each stage's own checks run too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from acquire.session import AcquireConfig
from generators.corpus.build import WorldConfig
from generators.llm.registry import BackendConfig
from generators.synth.synthesize import SynthConfig
from selfplay.play import PlayConfig
from storage import configfile
from storage.configcli import json_schema
from storage.runs import config_hash
from train.configs import GRPOConfig, SFTConfig, TrainConfig
from train.evaluate import EvalConfig
from validators.runner import ValidateConfig


@dataclass(frozen=True)
class Section:
    """A stage's options: its config classes, the loop's defaults, the fields the loop wires."""

    configs: tuple[type, ...]
    defaults: dict = field(default_factory=dict)
    wired: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)  # options of the loop's own (JSON Schema of each)


_TRAIN_WIRED = ("data", "model", "out", "resume", "nproc")
SECTIONS: dict[str, Section] = {
    "backend": Section((BackendConfig,)),
    "corpus": Section((WorldConfig,), {"entities": 1000},
                      extra={"file": {"type": ["string", "null"],
                                      "description": "import this corpus file instead of building the world "
                                                     "(forgeplay corpus import: HotpotQA, 2Wiki, JSONL, Parquet)"}}),
    "synthesize": Section((SynthConfig,), {"n": 32, "texts": "template", "chunk": 16, "top_k": "1", "top_k_rate": 1.0,
                                          "variants_per_tool": 0, "distractors_min": 6, "distractors_max": 6}, ("dataset", "run_id", "tool_style")),
    # the judge (the backend section's model) reads a sample of 16 records; its verdicts join the funnel
    "validate": Section((ValidateConfig,), {"layers": "schema,rules,judge,dedup", "judge_sample": 16},
                        ("dataset", "input", "out", "corpus", "run_id", "kind")),
    # a turn may take 160 new tokens: at 96 the thinks of a fine-tuned model were cut before the answer;
    # the SFT data of the loop's defaults has assistant turns of up to 136 to 142 tokens (synthesis
    # seeds 7, 1 and 2), so the stages that sample the SFT model (acquire, grpo) take 160 too
    "eval": Section((EvalConfig,), {"limit": 8, "batch_size": 8, "max_new_tokens": 160, "max_turns": 5},
                    ("data", "model", "tool_style")),
    # what experiments/sft_tool_use.py found teaches the answer format in a few steps (at 5e-5 and
    # 8 layers, 10 steps changed nothing the evaluation sees)
    "sft": Section((SFTConfig, TrainConfig), {"max_steps": 6, "lr": 3e-4, "batch_size": 2, "train_layers": 10,
                                              "checkpoint_every": 3}, _TRAIN_WIRED),
    # the base examiner poses no task yet (experiments/selfplay_yield.py): iteration 0 takes the
    # world's demonstrations (its examiner update trains on them as demonstrations, so there is no
    # separate warm-start), the student learns from reward and its EMA teacher; iteration 1 samples
    # the examiner, its tasks filtered for answerability by the student. Both updates are short.
    "selfplay": Section((PlayConfig,), {"tasks": 4, "attempts": 2, "max_new_tokens": 96, "demo_tasks": True,
                                        "train": True, "answerability": True, "warmstart": False, "iterations": 2,
                                        "examiner_turns": 3, "examiner_steps": 1, "student_steps": 2,
                                        "update_batch": 2, "train_layers": 10},
                        ("dataset", "out", "examiner", "student", "checkpoints", "resume", "tool_style")),
    "acquire": Section((AcquireConfig,), {"strategy": "care", "budget": 4.0, "n": 4, "batch": 4, "limit": 4,
                                          "max_new_tokens": 160, "label_warmup": 1,
                                          "triples": "trained"}, ("dataset", "out", "model", "tool_style")),
    # one step of one group: a GRPO step of two groups took 4.6 minutes on two cores
    "grpo": Section((GRPOConfig, TrainConfig), {"labels": "care", "budget": 8.0, "max_steps": 1, "batch_size": 1,
                                                "group_size": 4, "limit": 8, "max_new_tokens": 160, "lr": 1e-5,
                                                "label_warmup": 1, "checkpoint_every": 1,
                                                "triples": "trained"},
                    _TRAIN_WIRED + ("labels_out", "tool_style")),
}
# the stages in the order they run; an eval stage measures the model the stage before made
STAGES = ("corpus", "synthesize", "validate", "eval-base", "sft", "eval-sft", "selfplay", "acquire", "grpo",
          "eval-grpo")
TOP = {"dataset": {"type": "string", "description": "the world dataset; the producers write <dataset>_selfplay "
                                                      "and <dataset>_labels beside it"},
       "model": {"type": ["string", "null"], "description": "base model folder or prepared name (default: embedded)"},
       "tool_style": {"enum": ["compact", "full"], "description": "tools in every prompt the loop writes or asks "
                      "(synthesis, evaluation, acquisition, GRPO): compact one-line signatures, about 5x fewer tokens "
                      "than full JSON schemas"},
       "skip": {"type": "array", "items": {"enum": list(STAGES)}, "description": "stages to leave out"}}


def file_schema() -> dict:
    """The JSON Schema of a loop config file: the top-level settings and a section per stage,
    its options the fields of its configs minus those the loop wires."""
    props = dict(TOP)
    for name, sec in SECTIONS.items():
        schema = json_schema(*sec.configs)
        schema["properties"] = {k: v for k, v in schema["properties"].items() if k not in sec.wired}
        schema["properties"].update(sec.extra)
        props[name] = schema
    return {"type": "object", "additionalProperties": False, "properties": props}


def _unknown(path: list, field: str) -> str | None:
    """A wired option is the loop's to set; other unknown names get the schema's list."""
    if len(path) == 1 and path[0] in SECTIONS and field in SECTIONS[path[0]].wired:
        return f"set by the loop (it wires {', '.join(SECTIONS[path[0]].wired)} from the stages before)"
    return None


def renamed(doc: dict) -> dict:
    """`doc` with a section's old option names (a field's `aliases`, e.g. acquire's `p` for
    `label_p`) read as the new ones, each with a one-line note on stderr, for one release."""
    import sys

    for name, sec in SECTIONS.items():
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
    for name, sec in SECTIONS.items():
        out[name] = {**sec.defaults, **(doc.get(name) or {})}
    for name in SECTIONS:  # each stage's own checks (a bad value, not only a bad name)
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
    from generators.llm.registry import BACKENDS

    check_model(config["model"], "model")
    file = config["corpus"].get("file")
    if file and not Path(file).is_file():
        raise ValueError(f"corpus.file: no such file: {file}")
    backend = config["backend"].get("backend", "transformers")
    if backend not in BACKENDS:
        raise ValueError(f"backend.backend: unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")


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
    for cls in SECTIONS[name].configs:  # each class takes its own fields (the loop's extras, e.g. file, none)
        names = {f.name for f in dataclasses.fields(cls)}
        out.append(cls(**{k: v for k, v in opts.items() if k in names}))
    for c in out:
        if hasattr(c, "check"):
            c.check()
    return out


def wiring(name: str, config: dict, run_dir, policy: str | None, base: str | None) -> dict:
    """The options of stage `name` that the loop sets: the datasets it reads and writes, the
    model it starts from (`policy`: the latest trained one; `base`: the loop's base model),
    its run folder under `run_dir` and the tool style of its prompts; training stages always
    resume (a rerun continues)."""
    dataset, folder, style = config["dataset"], f"{run_dir}/{name}", config["tool_style"]
    return {
        "synthesize": {"dataset": dataset, "tool_style": style},
        "validate": {"dataset": dataset},
        "eval": {"data": dataset, "model": policy, "tool_style": style},
        "sft": {"data": dataset, "model": base, "out": folder, "resume": True},
        "selfplay": {"dataset": dataset, "out": f"{dataset}_selfplay", "examiner": base, "student": policy,
                     "checkpoints": folder, "resume": True, "tool_style": style},
        "acquire": {"dataset": dataset, "out": f"{dataset}_labels", "model": policy, "tool_style": style},
        "grpo": {"data": dataset, "model": policy, "out": folder, "labels_out": f"{dataset}_labels", "resume": True,
                 "tool_style": style},
    }.get(name, {})


def run_id(config: dict) -> str:
    """The loop run's id: a hash of its resolved config (the same config is the same run)."""
    return f"run-{config_hash(config)}"

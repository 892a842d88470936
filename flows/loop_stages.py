"""The loop's stages, each declared once, in the order `forgeplay run` runs them: its name, its
section of the loop config (the config classes, the loop's defaults, the options the loop
wires and how), the function that runs it, the flows `forgeplay serve` can schedule from it
and the report sections it feeds. The loop config's schema and checks (flows/loop_config.py),
its reference page (flows/config_reference.py), the loop (flows/run.py), the schedules
(flows/schedules.py) and the run report are all read off `STAGES`; a new stage is one runner
plus one entry:

    Stage("count", ConfigSection("count", (CountConfig,), {"n": 8}, "a counter",
                                 wire=lambda w: {"dataset": w.dataset}),
          run=count_runner, report=(Part("count", "Counted rows", count_section),))

A runner takes the running loop (flows/run.py `Loop`: its configs, data root, models and
record) and returns (summary, rows in, rows out, a note for the stage table).
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, field
from typing import Callable, NamedTuple

from acquire.session import AcquireConfig
from flows.engine import Flow, task
from flows.runners import RunnerConfig
from generators.corpus.build import WorldConfig
from generators.llm.registry import BackendConfig
from generators.synth.synthesize import SynthConfig
from reports.report import PARTS, Part
from selfplay.play import PlayConfig
from selfplay.warmstart import WarmstartConfig
from train.configs import GRPOConfig, SFTConfig, TrainConfig
from train.evaluate import EvalConfig
from validators.validator import ValidateConfig


class Wires(NamedTuple):
    """What the loop hands a stage: the world dataset, the stage's run folder, the prompts'
    tool style, the latest trained model (`policy`) and the loop's base model."""

    dataset: str
    folder: str
    style: str
    policy: str | None
    base: str | None


SAMPLE_WIRES = Wires("<dataset>", "<run>/<stage>", "compact", None, None)


@dataclass(frozen=True)
class ConfigSection:
    """A section of the loop config: its name, the config classes whose fields are its
    options, the loop's defaults, the command whose options they are (for the reference page),
    `wire(Wires) -> {option: value}` for the options the loop sets, `fixed` ones the loop
    refuses without setting, and `extra` options of the loop's own (a JSON Schema each)."""

    name: str
    configs: tuple[type, ...]
    defaults: dict = field(default_factory=dict)
    command: str = ""
    wire: Callable[[Wires], dict] = lambda w: {}
    fixed: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)

    @property
    def wired(self) -> tuple[str, ...]:
        """Every option the loop sets or refuses; a file that sets one is refused."""
        return tuple(self.wire(SAMPLE_WIRES)) + self.fixed


@dataclass(frozen=True)
class Servable:
    """A flow `forgeplay serve` can schedule: `target` ("module:attribute", a flow of
    flows/engine.py or a function of the configs that returns one) and the config dataclasses
    whose fields are its parameters, each passed as a dict to the flow parameter named beside
    it in `params`; `check(*configs)` raises ValueError on values the command would refuse
    before running; `command` the CLI command whose options the parameters are."""

    target: str
    configs: tuple[type, ...]
    params: tuple[str, ...]
    check: Callable | None = None
    command: str = ""

    def flow(self, configs: list):
        """The Prefect flow to deploy (flows/engine.py `Flow.prefect`)."""
        module, attr = self.target.split(":")
        obj = getattr(importlib.import_module(module), attr)
        return (obj if isinstance(obj, Flow) else obj(*configs)).prefect()


@dataclass(frozen=True)
class Stage:
    """One stage of the loop (module docstring)."""

    name: str
    section: ConfigSection
    run: Callable
    servable: dict[str, Servable] = field(default_factory=dict)
    report: tuple[Part, ...] = ()


@task(name="evaluate")
def eval_task(cfg, root: str, progress: bool) -> dict:
    from train.evaluate import run_eval

    return run_eval(cfg, root, progress, warn=lambda w: print(f"warning: {w}"))  # before its rollouts


@task(name="import-corpus")
def import_task(path: str, root: str, dataset: str) -> dict:
    from pathlib import Path

    from generators.corpus.importer import import_file

    rep = import_file(Path(path), root, dataset)
    return {"run_id": rep.run_id, "records": rep.records, "imported": rep.imported, "written": rep.written,
            "rejects": len(rep.rejects)}


def _corpus(loop):
    (world,) = loop.configs("corpus")
    file = loop.config["corpus"].get("file")
    if file:
        out = import_task(file, loop.root, loop.dataset)
        return out, out["records"], out["imported"], f"imported {file}"
    from flows.pipeline import corpus_task
    from flows.configs import PipelineConfig

    out = corpus_task(loop.root, PipelineConfig(dataset=loop.dataset, seed=world.seed, entities=world.entities))
    return out, None, out["documents"] + out["triples"], f"world of {world.entities} entities"


def _synthesize(loop):
    from flows.synthesize import synthesize_flow

    (synth,) = loop.configs("synthesize")
    s = synthesize_flow(asdict(synth), loop.backend(), loop.root, loop.progress)
    return s, s["planned"], s["written"], f"texts by {synth.texts}; {s['skipped_committed']} already committed"


def _validate(loop):
    from flows.validate import validate_flow

    (cfg,) = loop.configs("validate")
    s = validate_flow(asdict(cfg), loop.backend(), loop.root, loop.progress)
    loop.record.data["datasets"]["accepted"] = s["accepted_dataset"]
    return s, s["rows_in"], s["rows_out"], f"layers {cfg.layers}"


def _evaluate(label: str) -> Callable:
    def run(loop):
        (cfg,) = loop.configs("eval")
        s = eval_task(cfg, loop.root, loop.progress)
        loop.record.data["eval"][label] = s
        return s, s["rollouts"], None, f"{label}: exact match {s['em']:.3f}, F1 {s['f1']:.3f}"
    return run


def _train(kind: str) -> Callable:
    def run(loop):
        from flows.train import train_flow

        cfg, tcfg = loop.configs(kind)
        s = train_flow(kind, asdict(cfg), asdict(tcfg), loop.root, loop.progress)
        loop.trained(kind, s)
        last = s.get("last") or {}
        note = ", ".join(f"{k} {last[k]:.3f}" for k in ("loss", "reward") if k in last)
        return s, None, s["steps"], f"{s['steps']} steps; {note}"
    return run


def _selfplay(loop):
    from flows.selfplay import selfplay_flow

    (cfg,) = loop.configs("selfplay")
    s = selfplay_flow(asdict(cfg), loop.root, loop.progress)
    loop.record.data["datasets"]["selfplay"] = s["dataset"]
    if cfg.train:
        if cfg.warmstart:
            loop.record.data["datasets"]["demos"] = WarmstartConfig(dataset=cfg.dataset).demos_dataset()
        loop.models["selfplay"] = loop.models["policy"] = s["models"]["student"]
        loop.record.data["train_runs"]["selfplay"] = cfg.checkpoints
    tasks = sum(it.get("tasks", 0) for it in s["iterations"])
    attempts = sum(it.get("attempts", 0) for it in s["iterations"])
    return s, cfg.tasks * cfg.iterations, tasks, f"{tasks} tasks, {attempts} attempts"


def _acquire(loop):
    from flows.acquire import acquire_flow

    (cfg,) = loop.configs("acquire")
    s = acquire_flow(asdict(cfg), loop.root, loop.progress)
    loop.record.data["datasets"]["labels"] = s["dataset"]
    bought = sum(b.get("bought", 0) for b in s["batches"])
    return s, None, bought, f"{cfg.strategy}: {bought} labels bought now; ledger spent {s['ledger'].get('spent')}"


BACKEND = ConfigSection("backend", (BackendConfig,), command="the LLM backend of every stage that generates "
                        "(`forgeplay synthesize --help`: --backend, ...)")
# a turn may take 160 new tokens: at 96 the thinks of a fine-tuned model were cut before the answer;
# the SFT data of the loop's defaults has assistant turns of up to 136 to 142 tokens (synthesis
# seeds 7, 1 and 2), so the stages that sample the SFT model (acquire, grpo) take 160 too
EVAL = ConfigSection("eval", (EvalConfig,), {"limit": 8, "batch_size": 8, "max_new_tokens": 160, "max_turns": 5},
                     "`forgeplay train eval` (every eval stage: eval-base, eval-sft, eval-grpo)",
                     wire=lambda w: {"data": w.dataset, "model": w.policy, "tool_style": w.style})
EVAL_PARTS = (PARTS["eval"],)
TRAIN_FIXED = ("nproc",)

STAGES: tuple[Stage, ...] = (
    Stage("corpus", ConfigSection(
        "corpus", (WorldConfig,), {"entities": 1000},
        "`forgeplay corpus world`, or `file` to import a corpus as `forgeplay corpus import` does",
        extra={"file": {"type": ["string", "null"],
                        "description": "import this corpus file instead of building the world "
                                       "(forgeplay corpus import: HotpotQA, 2Wiki, JSONL, Parquet)"}}), _corpus),
    Stage("synthesize", ConfigSection(
        "synthesize", (SynthConfig,), {"n": 32, "texts": "template", "chunk": 16, "top_k": "1", "top_k_rate": 1.0,
                                       "variants_per_tool": 0, "distractors_min": 6, "distractors_max": 6},
        "`forgeplay synthesize`", wire=lambda w: {"dataset": w.dataset, "tool_style": w.style}, fixed=("run_id",)),
        _synthesize,
        {"synthesize": Servable("flows.synthesize:synthesize_flow", (SynthConfig, BackendConfig),
                                ("config", "backend"))},
        (PARTS["mixes"], PARTS["tokens"])),
    # the judge (the backend section's model) reads a sample of 16 records; its verdicts join the funnel
    Stage("validate", ConfigSection(
        "validate", (ValidateConfig,), {"layers": "schema,rules,judge,dedup", "judge_sample": 16},
        "`forgeplay validate`", wire=lambda w: {"dataset": w.dataset},
        fixed=("input", "out", "corpus", "run_id", "kind")), _validate,
        {"validate": Servable("flows.validate:flow_for", (ValidateConfig, BackendConfig, RunnerConfig),
                              ("config", "backend", "runner"),
                              check=lambda cfg, _, runner: (cfg.layer_list(), runner.kind()))},
        (PARTS["funnel"],)),
    Stage("eval-base", EVAL, _evaluate("base"), report=EVAL_PARTS),
    # what experiments/sft_tool_use.py found teaches the answer format in a few steps (at 5e-5 and
    # 8 layers, 10 steps changed nothing the evaluation sees)
    Stage("sft", ConfigSection(
        "sft", (SFTConfig, TrainConfig), {"max_steps": 6, "lr": 3e-4, "batch_size": 2, "train_layers": 10,
                                          "checkpoint_every": 3}, "`forgeplay train sft`",
        wire=lambda w: {"data": w.dataset, "model": w.base, "out": w.folder, "resume": True}, fixed=TRAIN_FIXED),
        _train("sft"), report=(PARTS["curves"],)),
    Stage("eval-sft", EVAL, _evaluate("sft"), report=EVAL_PARTS),
    # the base examiner poses no task yet (experiments/selfplay_yield.py): iteration 0 takes the
    # world's demonstrations (its examiner update trains on them as demonstrations, so there is no
    # separate warm-start), the student learns from reward and its EMA teacher; iteration 1 samples
    # the examiner, its tasks filtered for answerability by the student. Both updates are short.
    Stage("selfplay", ConfigSection(
        "selfplay", (PlayConfig,), {"tasks": 4, "attempts": 2, "max_new_tokens": 96, "demo_tasks": True,
                                    "train": True, "answerability": True, "warmstart": False, "iterations": 2,
                                    "examiner_turns": 3, "examiner_steps": 1, "student_steps": 2,
                                    "update_batch": 2, "train_layers": 10}, "`forgeplay selfplay run`",
        wire=lambda w: {"dataset": w.dataset, "out": f"{w.dataset}_selfplay", "examiner": w.base,
                        "student": w.policy, "checkpoints": w.folder, "resume": True, "tool_style": w.style}),
        _selfplay,
        {"selfplay": Servable("flows.selfplay:selfplay_flow", (PlayConfig,), ("config",), command="selfplay run"),
         "selfplay-warmstart": Servable("flows.selfplay:warmstart_flow", (WarmstartConfig, TrainConfig),
                                        ("config", "train"), command="selfplay warmstart")},
        (PARTS["curves"], PARTS["examiner"])),
    Stage("acquire", ConfigSection(
        "acquire", (AcquireConfig,), {"strategy": "care", "budget": 4.0, "n": 4, "batch": 4, "limit": 4,
                                      "max_new_tokens": 160, "label_warmup": 1, "triples": "trained"},
        "`forgeplay acquire-labels`",
        wire=lambda w: {"dataset": w.dataset, "out": f"{w.dataset}_labels", "model": w.policy,
                        "tool_style": w.style}), _acquire,
        {"acquire-labels": Servable("flows.acquire:acquire_flow", (AcquireConfig,), ("config",))},
        (PARTS["labels"],)),
    # one step of one group: a GRPO step of two groups took 4.6 minutes on two cores
    Stage("grpo", ConfigSection(
        "grpo", (GRPOConfig, TrainConfig), {"labels": "care", "budget": 8.0, "max_steps": 1, "batch_size": 1,
                                            "group_size": 4, "limit": 8, "max_new_tokens": 160, "lr": 1e-5,
                                            "label_warmup": 1, "checkpoint_every": 1, "triples": "trained"},
        "`forgeplay train grpo`",
        wire=lambda w: {"data": w.dataset, "model": w.policy, "out": w.folder, "resume": True,
                        "labels_out": f"{w.dataset}_labels", "tool_style": w.style}, fixed=TRAIN_FIXED),
        _train("grpo"), report=(PARTS["curves"],)),
    Stage("eval-grpo", EVAL, _evaluate("grpo"), report=EVAL_PARTS),
)


def stage_names() -> tuple[str, ...]:
    """The stages in the order they run."""
    return tuple(s.name for s in STAGES)


def sections() -> dict[str, ConfigSection]:
    """The loop config's sections: the backend's, then each stage's (stages that share one,
    the eval stages, name it once), in stage order. ValueError when two differ in one name."""
    out = {BACKEND.name: BACKEND}
    for s in STAGES:
        if out.setdefault(s.section.name, s.section) is not s.section:
            raise ValueError(f"stage {s.name}: another stage declares a different section {s.section.name!r}")
    return out


def stage(name: str) -> Stage:
    """The stage named `name` (KeyError naming the stages there are)."""
    for s in STAGES:
        if s.name == name:
            return s
    raise KeyError(f"no stage {name!r}: the stages are {', '.join(stage_names())}")


def servables() -> dict[str, Servable]:
    """The flows the stages let `forgeplay serve` schedule, in stage order."""
    return {k: v for s in STAGES for k, v in s.servable.items()}


def report_parts() -> list[Part]:
    """The run report's sections: the stage table, each stage's own in stage order (once each),
    then shard integrity."""
    out = {"stages": PARTS["stages"]}
    for s in STAGES:
        for part in s.report:
            out.setdefault(part.key, part)
    out.setdefault("shards", PARTS["shards"])
    return list(out.values())

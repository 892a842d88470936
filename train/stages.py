"""The registry of training stage kinds. A kind is a name, a config class (its fields are the
command's options), a `build` that loads the model and the data and makes the Trainer step
function, an optional cheap `count` of the training rows (no model loaded; the launcher of a
multi-process run reports and checks it before starting the ranks), the record kinds of
`--dataset` it trains on (`reads`: train/run.py `check_stage` refuses a dataset without them
before a model loads) and the metrics drawn in curves.png. train/run.py runs any kind; `python -m train KIND` and `forgeplay train KIND` are
generated from this registry (`add_stage_commands`), so a new kind needs no CLI code:

    def build_toy(cfg, tcfg, root, device) -> Built:
        path, tok, model = load_model(cfg.model, device)
        return Built(model, tok, toy_step, load_toy_rows(root, cfg), loss_weight=None)

    register(StageKind("toy", ToyConfig, build_toy, help="Train the toy objective."))

This module imports no torch (the CLI builds its options from it); `build` and `count` import
what they need when called.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from storage.configcli import USER_ERRORS, config_command
from train import plugins
from train.configs import GRPOConfig, SFTConfig, TrainConfig
from train.labelled import check_labels

# the stat each step function reports whose count its loss is a mean over (train/trainer.py)
SFT_LOSS_WEIGHT = "trained_tokens"  # cross entropy is a mean over the labelled tokens
GRPO_LOSS_WEIGHT = "tokens"  # the token-mean objective is a mean over the policy's tokens


@dataclass
class Built:
    """What a kind's `build` returns: the Trainer's model, step function and data, the stat
    the step's loss is a mean over (None: micro-batches weigh the same), counts for the
    report ("rows": rows read, when it differs from len(data)) and a note on the load."""

    model: Any
    tokenizer: Any
    step: Callable[[Any, list], tuple[Any, dict]]
    data: Sequence
    loss_weight: str | None
    counts: dict = field(default_factory=dict)
    notes: str = ""
    lengths: list[int] | None = None  # tokens of each example: token-budget micro-batches (train/trainer.py)
    workload: Any = None  # train.memory.Workload of the largest step: the memory plan (None: no plan)
    on_plan: Callable[[Any], None] | None = None  # gets the train.memory.Plan once it is made
    on_trainer: Callable[[Any], None] | None = None  # gets the Trainer before the first step
    extras: dict = field(default_factory=dict)  # name -> object with state_dict(): saved in each checkpoint
    warnings: list[str] = field(default_factory=list)  # about the model or the options: in the run's summary
    kinds: list[str] | None = None  # each example's kind, for --order kinds (None: the stage has none)
    frozen: list = field(default_factory=list)  # models beside the policy, forward only (a reference, a
    #   teacher): sharded with it under --shard (train/shard.py)


@dataclass(frozen=True)
class StageKind:
    """One registered kind of training stage (module docstring)."""

    name: str
    config: type  # a dataclass with at least `data`, `model` and `out`
    build: Callable[[Any, TrainConfig, Any, Any], Built]  # (cfg, train_cfg, root, device)
    count: Callable[[Any, Any], tuple[int, dict]] | None = None  # (root, cfg) -> (rows, counts)
    curves: tuple[str, ...] = ("loss", "lr", "tokens_per_s")
    help: str = ""
    one_process: bool = False  # its ranks cannot be launched (run_stage refuses --nproc > 1)
    module: str = "train"  # `python -m MODULE KIND` runs a rank (a package above train registers its kinds there)
    check: Callable[[Any, TrainConfig], None] | None = None  # (cfg, train_cfg): options wrong together
    reads: tuple[str, ...] = ()  # record kinds of --dataset it trains on (any of them): checked before a model loads


TRAINING_KINDS: dict[str, StageKind] = {}


def register(kind: StageKind) -> StageKind:
    TRAINING_KINDS[kind.name] = kind
    return kind


def get_kind(name: str) -> StageKind:
    plugins.load()
    if name not in TRAINING_KINDS:
        raise ValueError(f"unknown training stage {name!r}; known: {', '.join(TRAINING_KINDS)}")
    return TRAINING_KINDS[name]


def add_stage_commands(app, call: Callable[[str, Any, TrainConfig, Any], None]) -> None:
    """Add one command per registered kind to the Typer `app`: options from the kind's config
    and TrainConfig, then `call(kind_name, cfg, train_cfg, data_root)`."""
    plugins.load()
    for kind in TRAINING_KINDS.values():
        _add_command(app, kind, call)


def _add_command(app, kind: StageKind, call) -> None:
    def command(cfg, train: TrainConfig, data_root=None) -> None:
        call(kind.name, cfg, train, data_root)

    command.__name__ = kind.name
    config_command(app, kind.name, kind.config, TrainConfig, help=kind.help, errors=USER_ERRORS,
                   label=f"train {kind.name}")(command)


# ---- what the built-in kinds load --------------------------------------------------------

def check_grpo(cfg: GRPOConfig, tcfg: TrainConfig) -> None:
    """--labels (train/labelled.py), a --rollout-backend that follows the trained weights, and no
    --engine verl here: `forgeplay train grpo` runs that (train/verl_launch.py); this trainer is
    the engine `trainer`."""
    from generators.llm.kinds import FOLLOW, require

    if cfg.engine != "trainer" or cfg.dry_run:
        raise ValueError("--engine verl and --dry-run are run by `forgeplay train grpo`, not by forgeplay's trainer")
    require(cfg.rollout_backend, "--rollout-backend", FOLLOW)
    check_labels(cfg)


def load_model(name: str | None, device=None, shard: str = "none"):
    """(path, tokenizer, float32 model on `device`; default: cuda when there is one). Sharded
    over several ranks (`shard` full or grad_op under torchrun): rank 0 reads the weights into
    host memory and every other rank builds the model on the meta device (no weights); the
    Trainer shards them and hands each rank its slice of rank 0's weights (train/shard.py
    `shard_from_first`), so no rank holds the whole model on its device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from generators.llm.model_store import resolve_model
    from train.shard import loads_whole

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = resolve_model(name)
    tok = AutoTokenizer.from_pretrained(path)
    whole = loads_whole(shard)
    if whole is False:
        with torch.device("meta"):
            return path, tok, AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if whole:  # rank 0 of a sharded run: in host memory until the Trainer shards it
        return path, tok, model
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return path, tok, model.to(device)


def sft_examples(root, cfg: SFTConfig, tokenizer) -> tuple[list, dict]:
    """Tokenized trajectories and their counts; ValueError when none is trainable."""
    from train.sft import load_examples

    examples, counts = load_examples(root, cfg.data, tokenizer, cfg)
    if not examples:
        raise ValueError(f"no trainable trajectories in {cfg.data!r}: {counts}")
    return examples, counts


def build_sft(cfg: SFTConfig, tcfg: TrainConfig, root, device=None) -> Built:
    """The model with only its last `cfg.train_layers` blocks trainable (0 = all), the tokenized
    trajectories and the SFT step (cross entropy on assistant tokens); with `max_batch_tokens`
    the step packs each micro-batch into one row (train/packing.py)."""
    from train.losses import sft_loss_fn
    from train.neftune import check_alpha
    from train.packing import use_packed_attention
    from train.sft import make_step, train_last_layers

    check_alpha(cfg.neftune_alpha)  # before the model and the data are loaded
    sft_loss_fn(cfg.loss_type)  # an unknown --loss-type is refused before the model loads too
    path, tok, model = load_model(cfg.model, device, tcfg.shard)
    params = train_last_layers(model, cfg.train_layers)
    examples, counts = sft_examples(root, cfg, tok)
    counts.update(trainable_params=params["trainable"], params=params["total"])
    packed = tcfg.max_batch_tokens > 0
    if packed:
        use_packed_attention(model)
    step = make_step(tok.pad_token_id, packed, cfg.neftune_alpha, cfg.loss_type)
    return Built(model, tok, step, examples, SFT_LOSS_WEIGHT, counts, f"model {path}",
                 [len(e["input_ids"]) for e in examples], sft_workload(examples, tcfg),
                 kinds=[e["kind"] for e in examples])


def sft_workload(examples: list[dict], tcfg: TrainConfig):
    """The largest SFT micro-batch: a packed row of at most `max_batch_tokens` tokens (a longer
    conversation alone), or `batch_size` conversations padded to the longest."""
    from train.memory import Workload
    from train.sft import IGNORE

    lens = sorted((len(e["input_ids"]) for e in examples), reverse=True)
    share = max(sum(x != IGNORE for x in e["labels"]) / max(1, len(e["labels"])) for e in examples)
    if tcfg.max_batch_tokens > 0:
        tokens = min(max(tcfg.max_batch_tokens, lens[0]), sum(lens[:tcfg.batch_size * tcfg.grad_accum]))
        return Workload(tokens, int(share * tokens) + 1, f"{tokens} tokens a micro-batch",
                        "--max-batch-tokens (or --max-len), train fewer blocks (--train-layers)")
    tokens = min(tcfg.batch_size, len(lens)) * lens[0]
    return Workload(tokens, int(share * tokens) + 1, f"{tcfg.batch_size} x {lens[0]} padded tokens a micro-batch",
                    "--batch-size (or --max-len), use --max-batch-tokens, train fewer blocks (--train-layers)")


def count_sft(root, cfg: SFTConfig) -> tuple[int, dict]:
    """The trainable trajectories, tokenized with the model's tokenizer only."""
    from transformers import AutoTokenizer

    from generators.llm.model_store import resolve_model

    path = resolve_model(cfg.model)
    examples, counts = sft_examples(root, cfg, AutoTokenizer.from_pretrained(path))
    return len(examples), counts


def build_grpo(cfg: GRPOConfig, tcfg: TrainConfig, root, device=None) -> Built:
    """GRPO: each rank rolls out its own share of the prompts (a whole group stays on one rank);
    with `max_batch_tokens` > 0 the rollouts' log-probability pass is packed into one row."""
    from train.grpo import build_session
    from train.packing import use_packed_attention
    from train.sft import cut_warning, train_last_layers, trained_turn

    path, tok, model = load_model(cfg.model, device, tcfg.shard)
    params = train_last_layers(model, cfg.train_layers)
    counts = {"trainable_params": params["trainable"], "params": params["total"]}
    longest = trained_turn(path)  # the model's record, read once
    warning = cut_warning(path, longest, cfg.max_new_tokens)
    if longest:  # an SFT model's record goes on to GRPO's final model
        counts["longest_turn"] = longest
    if warning and os.environ.get("RANK", "0") == "0":  # its rollouts would cut such turns
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    if tcfg.max_batch_tokens > 0:
        use_packed_attention(model)
    session = build_session(root, cfg, path, model)
    extras = {}
    if cfg.labels:  # label-aware GRPO (train/labelled.py): its labeller is checkpointed with the policy
        from train.labelled import make_labeller

        session.labeller = extras["labeller"] = make_labeller(cfg, root, session)
    return Built(model, tok, session.step, session.prompts, grpo_loss_weight(cfg),
                 {"prompts": len(session.prompts), **counts}, f"model {path}" + (f"; warning: {warning}" if warning else ""),
                 workload=session.workload(tcfg.batch_size, tok), on_plan=session.set_plan,
                 on_trainer=session.attach, extras=extras, warnings=[warning] if warning else [],
                 kinds=[p.meta.get("kind", "") for p in session.prompts], frozen=session.objective.frozen())


def grpo_loss_weight(cfg: GRPOConfig) -> str | None:
    """Policy tokens for the token-mean objective; other aggregates weigh micro-batches equally."""
    return GRPO_LOSS_WEIGHT if getattr(cfg, "aggregate", "token-mean") == "token-mean" else None


def count_grpo(root, cfg: GRPOConfig) -> tuple[int, dict]:
    """How many prompts GRPO will train on (without loading the model); ValueError when none."""
    from storage import load_table

    n = load_table(cfg.data, "triples", root, columns=["triple_id"]).num_rows
    n = min(n, cfg.limit) if cfg.limit else n
    if not n:
        raise ValueError(f"dataset {cfg.data!r} has no triples")
    return n, {"prompts": n}


register(StageKind(
    "sft", SFTConfig, build_sft, count_sft, curves=("loss", "lr", "tokens_per_s"), reads=("trajectories",),
    help="""Fine-tune a model on a dataset's validated trajectories (loss on assistant tokens
    only, rendered with the model's chat template). Writes checkpoints, metrics.jsonl,
    curves.png and the trained model (OUT/final); --resume continues after a kill; --nproc N
    trains data-parallel in N processes (one per GPU, or gloo on CPU)."""))

register(StageKind(
    "grpo", GRPOConfig, build_grpo, count_grpo, curves=("loss", "reward", "tokens_per_s"), check=check_grpo,
    reads=("triples",),
    help="""GRPO on a dataset's triples: multi-turn rollouts in which the policy calls the
    virtual search tools (BM25 simulator), rewarded by exact match / F1 of the final <answer>
    plus a format reward. Writes checkpoints, metrics.jsonl, curves.png and OUT/final;
    --resume continues after a kill; --nproc N trains data-parallel, each process rolling out
    its own prompts (a whole group stays on one process). With --labels STRATEGY the answers
    are held back: label-aware GRPO on majority-vote pseudo-labels and at most --budget bought
    labels (CARE); with --nproc N rank 0 buys for every rank's prompts."""))

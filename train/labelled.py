"""Label-aware GRPO's extension point (CARE). With `--labels STRATEGY` GRPO trains on prompts
whose answers it does not trust: after each step's rollouts, the labeller registered under
that name gives every prompt the label its rewards are computed against (the majority vote
of its rollouts, or a true label bought within `--budget`) and a weight on its advantages
(train/objective.py `prompt_weights`: 1 for a bought label, the probes' reliability for a
trusted pseudo-label, 0 for the rest). The labellers live above train (acquire/training.py
registers one per acquisition strategy); GRPO only calls the shape below:

    labeller = make_labeller(cfg, root, session)      # cfg.labels names it
    prompts, rewards, stats = labeller(prompts, rollouts, step)  # every prompt's meta["weight"] set
    labeller.state_dict(); labeller.load_state_dict(state)       # checkpointed with the policy

With `--nproc N` every rank calls the labeller on its own rollouts; the labeller gathers the
ranks' groups to rank 0, which alone keeps the ledger, the label source and the probes, decides
for all of them at once and sends each rank its labels and weights (acquire/training.py).

`LabelConfig` holds the options of buying labels, the same fields (and options) in
`acquire-labels` (acquire/session.py) and label-aware GRPO (train/configs.py): the share of a
batch to buy, CARE's gate and warm-up, and the source the labels come from, any of the
sources the labels plugin registers (acquire/sources.py: column, queue, llm).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from generators.llm.openai_http import URL_FORM
from train import plugins

# the registries of label sources (name -> source), as the labels plugin registers them
# (acquire/training.py registers acquire/sources.py's SOURCES): train reads only their names
_SOURCES: list[Mapping[str, Any]] = []
QUEUE_FORMATS = ("csv", "parquet")


def label_sources() -> tuple[str, ...]:
    """Where bought labels may come from (the plugins' sources)."""
    plugins.load()
    return tuple(name for registry in _SOURCES for name in registry)


@dataclass
class LabelConfig:
    """How labels are bought (module docstring); a config class that buys labels extends it."""

    label_p: float = field(default=0.2, metadata={"aliases": ("p",), "help": "fraction of each batch of prompts to buy labels for"})
    label_gate: float = field(default=0.1, metadata={"aliases": ("gate",), "help": "care: fraction of each batch most likely voted right, trained on its pseudo-label and never bought (p2)"})
    label_warmup: int = field(default=20, metadata={"aliases": ("warmup",), "help": "care: batches before stage 1 gates (the probes rank from the first batch, as CARE's code)"})
    source: str = field(default="column", metadata={"choices": label_sources, "help": "where bought labels come from: column (the held-back answers), queue (a file people fill in, then forgeplay labels ingest) or llm (an annotator model)"})
    label_cost: float = field(default=1.0, metadata={"help": "price of one label from --source (reserved, settled and recorded per label)"})
    queue_format: str = field(default="csv", metadata={"choices": QUEUE_FORMATS, "help": "queue: file format of the prompts to label, csv or parquet"})
    annotator_backend: str = field(default="openai", metadata={"help": "llm: the annotator's backend, transformers, vllm or openai"})
    annotator_model: str | None = field(default=None, metadata={"help": "llm: the annotator's model folder or name (openai: default the server's first model)"})
    annotator_url: str | None = field(default=None, metadata={"help": f"llm with the openai backend: the server's URL, {URL_FORM}"})
    annotator_max_tokens: int = field(default=64, metadata={"help": "llm: tokens per annotator reply at most"})

    def labels_dataset(self) -> str:
        """The dataset that keeps the bought labels and their ledger (each command names it)."""
        raise NotImplementedError

    def label_strategy(self) -> str:
        """The acquisition strategy that picks what to buy (each command names it)."""
        raise NotImplementedError

    def check_labelling(self) -> None:
        """One-line ValueErrors for bad label options, before anything loads."""
        from generators.llm.model_store import check_model
        from generators.llm.kinds import CONFIG, require

        if self.source not in label_sources():
            raise ValueError(f"--source must be one of {', '.join(label_sources())}, not {self.source!r}")
        if self.queue_format not in QUEUE_FORMATS:
            raise ValueError(f"--queue-format must be one of {', '.join(QUEUE_FORMATS)}, not {self.queue_format!r}")
        if self.label_cost < 0 or self.annotator_max_tokens < 1:
            raise ValueError("need --label-cost >= 0 and --annotator-max-tokens >= 1")
        if not 0 <= self.label_p <= 1 or not 0 <= self.label_gate < 1:
            raise ValueError("need 0 <= --label-p <= 1 and 0 <= --label-gate < 1")
        if self.source == "llm":
            require(self.annotator_backend, "--annotator-backend", CONFIG)
            if self.annotator_backend == "openai" and not self.annotator_url:
                raise ValueError("--source llm with the openai annotator backend needs --annotator-url")
            if self.annotator_backend != "openai":
                check_model(self.annotator_model, "--annotator-model")

# name -> factory(cfg, root, session) -> labeller (module docstring)
LABELLERS: dict[str, Callable[[Any, Any, Any], Any]] = {}


def register_labeller(name: str, factory: Callable[[Any, Any, Any], Any]) -> None:
    LABELLERS[name] = factory


def labellers() -> tuple[str, ...]:
    """The names `--labels` takes (the plugins' labellers, one per acquisition strategy)."""
    plugins.load()
    return tuple(LABELLERS)


def register_sources(registry: Mapping[str, Any]) -> None:
    """A plugin's registry of label sources (read live: a source added to it later counts)."""
    if not any(r is registry for r in _SOURCES):
        _SOURCES.append(registry)


def check_labels(cfg) -> None:
    """A readable error before anything loads: an unknown --labels or a bad label option."""
    if not getattr(cfg, "labels", ""):
        return
    plugins.load()
    if cfg.labels not in LABELLERS:
        known = ", ".join(LABELLERS) or "none registered (is forgeplay installed? train/plugins.py)"
        raise ValueError(f"--labels must be one of {known}, not {cfg.labels!r}")
    if cfg.budget < 0:
        raise ValueError("--labels needs --budget >= 0")
    cfg.check_labelling()
    if getattr(cfg, "label_reward", "binary") not in ("binary", "partial"):
        raise ValueError(f"--label-reward must be binary or partial, not {cfg.label_reward!r}")


def make_labeller(cfg, root, session):
    plugins.load()
    return LABELLERS[cfg.labels](cfg, root, session)

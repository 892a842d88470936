"""Config dataclasses of the flows that have no home package (kept free of Prefect imports,
so `forgeplay --help` stays fast)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PipelineConfig:
    """What `forgeplay pipeline` produces; an option it shares with `synthesize` has its default."""

    dataset: str = field(default="demo", metadata={"help": "dataset to build"})
    seed: int = field(default=7, metadata={"help": "seed of the world and of synthesis"})
    entities: int = field(default=1000, metadata={"help": "entities (documents) in the fictional world"})
    n: int = field(default=500, metadata={"help": "trajectories to synthesize"})
    max_think_tokens: int = field(default=64, metadata={"help": "token budget of one reasoning text"})
    chunk: int = field(default=32, metadata={"help": "trajectories per LLM batch and per committed shard"})
    texts: str = field(default="llm", metadata={"help": "who writes reasoning and answer wording: llm (the model), "
                                                       "or template (the program; no model is loaded, much faster)"})

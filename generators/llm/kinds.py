"""The kinds of backend, and what each can do: one table that every stage reads.

A stage names what it needs. `kinds_with(...)` lists the kinds that have it (an option's
choices), and `require(kind, option, ...)` checks a user's choice before anything loads,
with one line that says what the kind lacks and which kinds would do.

  kind          runs                                   can
  transformers  in this process (torch; the default)   generate, config, follow, swap, rollout
  vllm          in this process (vllm.LLM)             generate, config, follow
  vllm-server   vLLM's server (.venv-vllm, or a URL)   generate, follow, swap, rollout, stream
  openai        any OpenAI-compatible server (HTTP)    generate, config, rollout, stream, ship

    kinds_with(FOLLOW)                                   # ("transformers", "vllm", "vllm-server")
    require(cfg.rollout_backend, "--rollout-backend", FOLLOW)
"""

from __future__ import annotations

GENERATE = "generate"  # samples chat completions
CONFIG = "config"      # built from a BackendConfig (registry.py): synthesis, the model layers, the loop, an annotator
FOLLOW = "follow"      # samples from the weights a trainer changes as it runs (GRPO's rollouts)
SWAP = "swap"          # several models take turns on it (self-play's examiner, reader and student)
ROLLOUT = "rollout"    # drives the multi-turn tool rollouts of a named model with its tokenizer (eval, acquire)
STREAM = "stream"      # keeps many requests in flight across calls
SHIP = "ship"          # its settings go to worker processes (a fanned-out synthesis)

WHAT = {GENERATE: "sample", CONFIG: "be built from the backend options",
        FOLLOW: "sample from the weights being trained", SWAP: "let several models take turns",
        ROLLOUT: "run rollouts of a model folder", STREAM: "keep requests in flight",
        SHIP: "go to worker processes"}

KINDS: dict[str, frozenset[str]] = {
    "transformers": frozenset({GENERATE, CONFIG, FOLLOW, SWAP, ROLLOUT}),
    "vllm": frozenset({GENERATE, CONFIG, FOLLOW}),
    "vllm-server": frozenset({GENERATE, FOLLOW, SWAP, ROLLOUT, STREAM}),
    "openai": frozenset({GENERATE, CONFIG, ROLLOUT, STREAM, SHIP}),
}


def kinds_with(*needs: str) -> tuple[str, ...]:
    """The kinds that can do all of `needs`, in the table's order."""
    return tuple(k for k, can in KINDS.items() if can.issuperset(needs))


def require(kind: str, option: str, *needs: str) -> None:
    """ValueError (one line) unless `kind` is a kind that can do all of `needs`."""
    choices = ", ".join(kinds_with(*needs))
    if kind not in KINDS:
        raise ValueError(f"unknown {option} {kind!r}: choose one of {choices}")
    lacks = [WHAT[n] for n in needs if n not in KINDS[kind]]
    if lacks:
        raise ValueError(f"{option} {kind} cannot {' or '.join(lacks)} here: choose one of {choices}")

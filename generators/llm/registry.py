"""Pick an LLM backend from config: `make_backend(BackendConfig(...)) -> Backend`.

The default is the `transformers` backend with the embedded model on CPU. Backends are
imported lazily by name, so the `vllm` package is needed only when asked for:

    from generators.llm.registry import BackendConfig, make_backend
    be = make_backend(BackendConfig())                                   # embedded, CPU
    be = make_backend(BackendConfig(backend="openai", base_url="http://127.0.0.1:8000/v1", model="m"))
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from generators.llm.base import Backend
from generators.llm.kinds import CONFIG, require
from generators.llm.openai_http import URL_FORM, api_url
from storage.runs import config_hash

@dataclass
class BackendConfig:
    """Which backend and model a flow uses, and how hard it may push them."""

    backend: str = field(default="transformers", metadata={
        "help": "transformers (in process, CPU default), vllm (in process vllm.LLM) or openai (HTTP server)."})
    model: str | None = field(default=None, metadata={
        "help": "Model folder or prepared name; None = the embedded SmolLM2-135M-Instruct. "
                "For openai: the model name the server knows (default: the server's first model)."})
    base_url: str | None = field(default=None, metadata={
        "help": f"openai only: the server's URL, {URL_FORM}; several, comma-separated, share the requests."})
    api_key: str | None = field(default=None, metadata={
        "help": "openai only: API key (default: $OPENAI_API_KEY if the backend reads it)."})
    batch_size: int = field(default=16, metadata={
        "help": "transformers only: samples decoded together in one batch."})
    max_concurrency: int = field(default=0, metadata={
        "help": "openai only: HTTP requests in flight per endpoint; 0 = adapt to the server (from 64: up to what "
                "a vLLM or SGLang server runs, by the load it states at /metrics; elsewhere grows while latency "
                "holds; backs off on 429/503)."})
    max_retries: int = field(default=8, metadata={
        "help": "openai only: retries per request on 429/5xx/timeouts/dropped connections."})
    timeout: float = field(default=60.0, metadata={"help": "openai only: seconds per HTTP request."})
    dtype: str = field(default="float32", metadata={
        "help": "transformers only: float32 (CPU), bfloat16 or float16 (GPU)."})
    device: str = field(default="cpu", metadata={"help": "transformers only: torch device, e.g. cpu or cuda."})
    threads: int | None = field(default=None, metadata={
        "help": "transformers only: torch CPU threads for the process (default: the cores divided among the model processes running on this machine)."})
    max_prompt_tokens: int | None = field(default=None, metadata={
        "help": "transformers only: keep at most this many prompt tokens (the end)."})
    engine_kwargs: dict[str, Any] = field(default_factory=dict, metadata={
        "help": "vllm only: extra keyword arguments for vllm.LLM (e.g. max_model_len, gpu_memory_utilization)."})

    def to_dict(self) -> dict:
        return asdict(self)

    def config_hash(self) -> str:
        """Short stable hash of the config (for lineage and run ids), api_key left out. How
        hard the client pushes the server does not change a row: those fields are hashed at
        the values they had when run ids began (PACE), so a run's id is the same whatever
        they are, and older runs keep theirs."""
        return config_hash({**asdict(self), **PACE}, ignore=("api_key",), length=16)


# fields that set the pace, not the rows, and the value each had in run ids from the start
PACE = {"max_concurrency": 8, "max_retries": 4, "timeout": 60.0}


def server_model(base_url: str, api_key: str | None = None, timeout: float = 10.0) -> str:
    """The first model id an OpenAI-compatible server lists at GET {base_url}/models."""
    import urllib.request

    url = api_url(base_url.split(",")[0]) + "/models"
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())["data"][0]["id"]
    except (OSError, KeyError, IndexError, TypeError, ValueError) as e:
        raise ValueError(f"no model given and cannot list models at {url}: {e}") from e


def _transformers(cfg: BackendConfig, journal=None) -> Backend:
    from generators.llm.transformers_backend import TransformersBackend

    return TransformersBackend(cfg.model, batch_size=cfg.batch_size, dtype=cfg.dtype, device=cfg.device,
                               max_prompt_tokens=cfg.max_prompt_tokens, threads=cfg.threads)


def _vllm(cfg: BackendConfig, journal=None) -> Backend:
    from generators.llm.vllm_backend import VLLMBackend

    return VLLMBackend(model=cfg.model, **cfg.engine_kwargs)


def _openai(cfg: BackendConfig, journal=None) -> Backend:
    if not cfg.base_url:
        raise ValueError("the openai backend needs base_url (e.g. http://127.0.0.1:8000/v1)")
    from generators.llm.openai_backend import OpenAIBackend

    model = cfg.model or server_model(cfg.base_url, cfg.api_key, cfg.timeout)
    return OpenAIBackend(base_url=cfg.base_url, model=model, max_concurrency=cfg.max_concurrency or None,
                         max_retries=cfg.max_retries, timeout=cfg.timeout, api_key=cfg.api_key, journal=journal)


# name -> factory from a BackendConfig (and a journal of paid answers, which a backend in
# this process may ignore): the kinds that can do CONFIG in generators/llm/kinds.py, where a
# new kind also says what it can do
BACKENDS: dict[str, Callable[..., Backend]] = {
    "transformers": _transformers, "vllm": _vllm, "openai": _openai}


def check_backend(cfg: BackendConfig) -> None:
    """The backend options checked before anything loads or starts (one-line ValueError): a
    known --backend, --base-url for openai, and for a backend in this process a --model that
    is a model folder or a prepared name (generators/llm/model_store.py)."""
    require(cfg.backend, "--backend", CONFIG)
    if cfg.backend == "openai":
        if not cfg.base_url or not cfg.base_url.replace(",", "").strip():
            raise ValueError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
        if cfg.max_concurrency < 0:
            raise ValueError(f"--max-concurrency must be >= 0 (0 = adapt), got {cfg.max_concurrency}")
        return
    from generators.llm.model_store import check_model

    check_model(cfg.model)


def make_backend(cfg: BackendConfig | None = None, journal=None) -> Backend:
    """A ready backend for `cfg` (the default config gives the embedded model on CPU);
    `journal` (storage.journal.Journal): where an HTTP backend keeps every answer it paid for."""
    cfg = cfg or BackendConfig()
    if cfg.backend not in BACKENDS:
        raise ValueError(f"unknown backend {cfg.backend!r}: choose one of {', '.join(BACKENDS)}")
    return BACKENDS[cfg.backend](cfg, journal=journal)

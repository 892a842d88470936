"""Pick an LLM backend from config: `make_backend(BackendConfig(...)) -> Backend`.

Each kind built from config has its own options (a dataclass of what it reads) and a
factory that takes them: one entry of `BACKENDS`. BackendConfig is what a command, the loop
and a saved config take: `backend` and the options of every kind as one flat set, made from
the kinds' options (an option only some kinds read says so in its help);
`BackendConfig.options()` gives the chosen kind's, and `check_backend` refuses an option the
chosen kind does not read. A new kind is its options, its factory and its entry here (and its
row of what it can do in generators/llm/kinds.py). The default is the `transformers` backend
with the embedded model on CPU. Backends are imported lazily by name, so the `vllm` package is
needed only when asked for:

    from generators.llm.registry import BackendConfig, make_backend
    be = make_backend(BackendConfig())                                   # embedded, CPU
    be = make_backend(BackendConfig(backend="openai", base_url="http://127.0.0.1:8000/v1", model="m"))
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from generators.llm.base import Backend
from generators.llm.kinds import CONFIG, require
from generators.llm.openai_http import URL_FORM, api_url
from storage.runs import config_hash

MODEL = "Model folder or prepared name; None = the embedded SmolLM2-135M-Instruct."


@dataclass
class TransformersOptions:
    """`--backend transformers`: the model in this process, on torch (the default)."""

    model: str | None = field(default=None, metadata={"help": MODEL})
    batch_size: int = field(default=16, metadata={"help": "samples decoded together in one batch."})
    dtype: str = field(default="float32", metadata={"help": "float32 (CPU), bfloat16 or float16 (GPU)."})
    device: str = field(default="cpu", metadata={"help": "torch device, e.g. cpu or cuda."})
    threads: int | None = field(default=None, metadata={
        "help": "torch CPU threads for the process (default: the cores divided among the model processes running on this machine)."})
    max_prompt_tokens: int | None = field(default=None, metadata={
        "help": "keep at most this many prompt tokens (the end)."})


@dataclass
class VLLMOptions:
    """`--backend vllm`: vllm.LLM in this process."""

    model: str | None = field(default=None, metadata={"help": MODEL})
    engine_kwargs: dict[str, Any] = field(default_factory=dict, metadata={
        "help": "extra keyword arguments for vllm.LLM (e.g. max_model_len, gpu_memory_utilization)."})


@dataclass
class OpenAIOptions:
    """`--backend openai`: any OpenAI-compatible server, over HTTP."""

    model: str | None = field(default=None, metadata={
        "help": "the model name the server knows (default: the server's first model)."})
    base_url: str | None = field(default=None, metadata={
        "help": f"the server's URL, {URL_FORM}; several, comma-separated, share the requests."})
    api_key: str | None = field(default=None, metadata={
        "help": "API key (default: $OPENAI_API_KEY if the backend reads it)."})
    max_concurrency: int = field(default=0, metadata={
        "help": "HTTP requests in flight per endpoint; 0 = adapt to the server (from 64: up to what "
                "a vLLM or SGLang server runs, by the load it states at /metrics; elsewhere grows while latency "
                "holds; backs off on 429/503)."})
    max_retries: int = field(default=8, metadata={
        "help": "retries per request on 429/5xx/timeouts/dropped connections."})
    timeout: float = field(default=60.0, metadata={"help": "seconds per HTTP request."})


def _transformers(opts: TransformersOptions, journal=None) -> Backend:
    from generators.llm.transformers_backend import TransformersBackend

    return TransformersBackend(opts.model, batch_size=opts.batch_size, dtype=opts.dtype, device=opts.device,
                               max_prompt_tokens=opts.max_prompt_tokens, threads=opts.threads)


def _vllm(opts: VLLMOptions, journal=None) -> Backend:
    from generators.llm.vllm_backend import VLLMBackend

    return VLLMBackend(model=opts.model, **opts.engine_kwargs)


def _openai(opts: OpenAIOptions, journal=None) -> Backend:
    if not opts.base_url:
        raise ValueError("the openai backend needs base_url (e.g. http://127.0.0.1:8000/v1)")
    from generators.llm.openai_backend import OpenAIBackend

    model = opts.model or server_model(opts.base_url, opts.api_key, opts.timeout)
    return OpenAIBackend(base_url=opts.base_url, model=model, max_concurrency=opts.max_concurrency or None,
                         max_retries=opts.max_retries, timeout=opts.timeout, api_key=opts.api_key, journal=journal)


@dataclass(frozen=True)
class Kind:
    """A kind built from config: its options and the factory that takes them (and a journal
    of paid answers, which a backend in this process may ignore)."""

    options: type
    make: Callable[..., Backend]


# the kinds that can do CONFIG in generators/llm/kinds.py, where a new kind also says what it can do
BACKENDS: dict[str, Kind] = {
    "transformers": Kind(TransformersOptions, _transformers),
    "vllm": Kind(VLLMOptions, _vllm),
    "openai": Kind(OpenAIOptions, _openai),
}


class _Flat:
    """What BackendConfig does besides holding the options."""

    def options(self):
        """The options of the chosen kind, from this config's fields."""
        kind = BACKENDS[self.backend].options
        return kind(**{f.name: getattr(self, f.name) for f in dataclasses.fields(kind)})

    def to_dict(self) -> dict:
        return asdict(self)

    def config_hash(self) -> str:
        """Short stable hash of the config (for lineage and run ids), api_key left out. How
        hard the client pushes the server does not change a row: those fields are hashed at
        the values they had when run ids began (PACE), so a run's id is the same whatever
        they are, and older runs keep theirs."""
        return config_hash({**asdict(self), **PACE}, ignore=("api_key",), length=16)


def _flat_config() -> type:
    """BackendConfig: `backend`, then each kind's options in the order of BACKENDS (an option
    several kinds read once, with one default). An option's help names the kinds that read
    it where not all do ("openai only: ..."), and each kind's own words where they differ."""
    kinds: dict[str, list[str]] = {}
    first: dict[str, dataclasses.Field] = {}
    types: dict[str, Any] = {}
    helps: dict[str, dict[str, list[str]]] = {}
    for name, kind in BACKENDS.items():
        hints = typing.get_type_hints(kind.options)
        for f in dataclasses.fields(kind.options):
            if f.name in first and (f.default, f.default_factory) != (first[f.name].default, first[f.name].default_factory):
                raise TypeError(f"option {f.name} has two defaults")
            first.setdefault(f.name, f)
            types[f.name] = hints[f.name]
            kinds.setdefault(f.name, []).append(name)
            helps.setdefault(f.name, {}).setdefault(f.metadata["help"], []).append(name)
    flat = [("backend", str, field(default="transformers", metadata={
        "help": "transformers (in process, CPU default), vllm (in process vllm.LLM) or openai (HTTP server)."}))]
    for name, f in first.items():
        (text, readers), *others = helps[name].items()
        if len(kinds[name]) < len(BACKENDS) and not others:
            text = f"{' and '.join(readers)} only: {text}"
        text = " ".join([text] + [f"For {' and '.join(ks)}: {t}" for t, ks in others])
        default = {"default": f.default} if f.default is not dataclasses.MISSING else {"default_factory": f.default_factory}
        flat.append((name, types[name], field(**default, metadata={**f.metadata, "help": text, "kinds": tuple(kinds[name])})))
    return dataclasses.make_dataclass("BackendConfig", flat, bases=(_Flat,), namespace={"__module__": __name__})


BackendConfig = _flat_config()
BackendConfig.__doc__ = "Which backend and model a flow uses, and how hard it may push them (module docstring)."


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


def check_backend(cfg: BackendConfig) -> None:
    """The backend options checked before anything loads or starts (one-line ValueError): a
    known --backend; no option set that the kind does not read (it would be ignored);
    --base-url for openai; and for a backend in this process a --model that is a model
    folder or a prepared name (generators/llm/model_store.py)."""
    require(cfg.backend, "--backend", CONFIG)
    reads = {f.name for f in dataclasses.fields(BACKENDS[cfg.backend].options)}
    for f in dataclasses.fields(cfg):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if f.name != "backend" and f.name not in reads and getattr(cfg, f.name) != default:
            option = "--" + f.name.replace("_", "-")
            raise ValueError(f"{option} is an option of --backend {' and '.join(f.metadata['kinds'])}; "
                             f"--backend {cfg.backend} does not read it")
    if cfg.backend == "openai":
        if not cfg.base_url or not cfg.base_url.replace(",", "").strip():
            raise ValueError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
        if cfg.max_concurrency < 0:
            raise ValueError(f"--max-concurrency must be >= 0 (0 = adapt), got {cfg.max_concurrency}")
        return
    from generators.llm.model_store import check_model

    check_model(cfg.model)


def make_backend(cfg: BackendConfig | None = None, journal=None) -> Backend:
    """A ready backend for `cfg` (the default config gives the embedded model on CPU), built
    from the chosen kind's options; `journal` (storage.journal.Journal): where an HTTP
    backend keeps every answer it paid for."""
    cfg = cfg or BackendConfig()
    if cfg.backend not in BACKENDS:
        raise ValueError(f"unknown backend {cfg.backend!r}: choose one of {', '.join(BACKENDS)}")
    return BACKENDS[cfg.backend].make(cfg.options(), journal=journal)

"""Tool-use evaluation of a model: greedy multi-turn rollouts (train/rollout.py) on a dataset's
triples, through the BM25 simulator, scored for well-formed tool calls and answer exact match.
It gives the before/after figures of a training run.

    forgeplay train eval --dataset demo --model runs/sft1/final --limit 64 --tool-style compact

By default only held-out triples are used: those no trajectory of the dataset was built from.
That set moves when the training data picks other triples; `--hold-out FILE` (triple ids, one
per line, the split `synthesize --hold-out FILE` kept out) asks exactly the file's triples,
so runs whose data differ are scored on the same questions.
The tools offered are the dataset's base tools (one per domain, and the calculator if it has
one; no paraphrased variants).

Per rollout: `called` (at least one tool call attempted), `well_formed` (at least one call,
and every call parsed, named an offered tool and had valid arguments), `answered` (ended
with an `<answer>`), `em` (normalized exact match of the answer). Rates are over all rollouts;
`tool_em` counts rollouts that both called a tool and answered exactly. `calls_per_rollout`
counts parsed calls, and `found_per_call` is the share of them whose results hold a page the
question needs (one of its golden documents). The simulator answers in its "good" mode, which
returns every needed page the tool's domain can see whatever the query, so this share measures
the choice of tool: the person search for a city finds none. `by_qtype` gives the same rates
per question type and hop count (e.g. `bridge/2`): a small model can learn to follow a two-hop
bridge long before it learns the arithmetic of a compositional question.
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass, field

from generators.llm.base import Wrapped
from generators.llm.kinds import ROLLOUT, kinds_with, require
from generators.llm.openai_http import URL_FORM
from train.configs import RolloutConfig


@dataclass
class EvalConfig(RolloutConfig):
    """What to evaluate (every field is a CLI option)."""

    temperature: float = field(default=0.0, metadata={"help": "sampling temperature (0 = greedy)"})
    data: str = field(default="", metadata={"required": True, "flag": "dataset", "aliases": ("data",), "help": "dataset whose triples are asked"})
    model: str | None = field(default=None, metadata={"help": "model folder or prepared name (default: embedded)"})
    limit: int = field(default=64, metadata={"help": "triples to ask at most (0 = all)"})
    held_out: bool = field(default=True, metadata={"help": "skip triples that the dataset's trajectories were built from"})
    hold_out: str = field(default="", metadata={"help": "ask exactly the triples of this file of ids (one per line; the split of synthesize --hold-out), by id"})
    tool_seed: int = field(default=0, metadata={"help": "seed of the simulator"})
    batch_size: int = field(default=16, metadata={"help": "rollouts generated together"})
    seed: int = field(default=0, metadata={"help": "sampling seed (when temperature > 0)"})
    backend: str = field(default="transformers", metadata={
        "flag": "rollout-backend", "aliases": ("backend",), "choices": lambda: BACKEND_KINDS,
        "help": "what samples: transformers (in this process, turns in lockstep), vllm-server (vLLM's server "
                "from .venv-vllm, or the one at --base-url; every conversation in flight at once) or openai "
                "(any OpenAI-compatible server at --base-url)"})
    url: str = field(default="", metadata={"flag": "base-url", "aliases": ("rollout-url", "url"),
                                           "help": f"vllm-server / openai: the server's URL, {URL_FORM}"})
    served_model: str = field(default="policy", metadata={"help": "openai: the model name the server knows"})


def held_out_triples(root, dataset: str, held_out: bool = True, limit: int = 0, hold_out: str = "") -> list[dict]:
    """The dataset's triples, minus those its trajectories use when `held_out`; sorted by id.
    With `hold_out` (a file of triple ids): exactly those, by id; ValueError when the dataset
    lacks one or a trajectory was built from one (the split leaked into training)."""
    from storage import load_table
    from storage.userfiles import read_split
    from train.triples import select_triples

    if not hold_out:
        return select_triples(root, dataset, False if held_out else None, limit, by_id=True)
    every = select_triples(root, dataset, None, 0, by_id=True)
    ids = set(read_split(hold_out, "--hold-out", [t["triple_id"] for t in every], dataset))
    triples = [t for t in every if t["triple_id"] in ids]
    used = ids & set(load_table(dataset, "trajectories", root, columns=["triple_id"]).column("triple_id").to_pylist())
    if used:
        raise ValueError(f"--hold-out: trajectories of dataset {dataset!r} were built from {len(used)} of its triples, "
                         f"e.g. {sorted(used)[0]!r}; synthesize with the same --hold-out")
    return triples[:limit] if limit else triples


def base_tools(root, dataset: str) -> list[dict]:
    """The dataset's tool rows that are not paraphrased variants (or a fresh bank's)."""
    from generators.tools.bank import build_bank
    from storage import load_table

    rows = load_table(dataset, "tools", root).to_pylist() or build_bank(seed=0, variants_per_tool=0)
    base = [t for t in rows if not t.get("variant_of")]
    return sorted(base or rows, key=lambda t: t["name"])


def summarize(outs) -> dict:
    """Rates over rollouts (module docstring)."""
    n = len(outs)
    if not n:
        return {"rollouts": 0}
    called = [o.stats["calls"] + o.stats["bad_calls"] > 0 for o in outs]
    well = [o.stats["calls"] > 0 and o.stats["bad_calls"] == 0 and o.stats["tool_errors"] == 0 for o in outs]
    answered = [o.stats["finish"] == "answer" for o in outs]
    em = [o.stats["em"] == 1.0 for o in outs]
    calls = sum(o.stats["calls"] for o in outs)
    return {"rollouts": n, "called": sum(called) / n, "well_formed": sum(well) / n, "answered": sum(answered) / n,
            "em": sum(em) / n, "tool_em": sum(c and e for c, e in zip(called, em)) / n,
            "f1": sum(o.stats["f1"] for o in outs) / n,
            "calls_per_rollout": calls / n, "found_per_call": sum(o.stats["found"] for o in outs) / max(1, calls)}


def by_qtype(triples: list[dict], outs) -> dict:
    """`summarize` per question type and hop count, keyed `qtype/hops`, sorted."""
    from generators.corpus.questions import question_kind

    groups: dict[str, list] = {}
    for t, o in zip(triples, outs):
        groups.setdefault(question_kind(t), []).append(o)
    return {k: summarize(v) for k, v in sorted(groups.items())}


def evaluate(backend, root, cfg: EvalConfig, progress: bool = False) -> tuple[dict, list]:
    """(summary, rollouts) of greedy tool-use rollouts of `backend` on the triples of `cfg.data`."""
    from generators.tools.retriever import index_dir
    from generators.tools.simulator import Simulator
    from storage import load_table
    from train.grpo import make_prompts
    from train.rollout import rollout

    triples = held_out_triples(root, cfg.data, cfg.held_out, cfg.limit, cfg.hold_out)
    tools = base_tools(root, cfg.data)
    docs = load_table(cfg.data, "documents", root).to_pylist()
    sim = Simulator(docs, seed=cfg.tool_seed, tools=tools, retriever=cfg.retriever, index_dir=index_dir(root))
    prompts = make_prompts(triples, tools, cfg.tool_style)
    outs = []
    from tqdm.auto import tqdm

    step = len(prompts) if backend.concurrent else cfg.batch_size  # a server takes them all
    for i in tqdm(range(0, len(prompts), step), desc="eval", unit="batch", disable=not progress or step >= len(prompts)):
        outs += rollout(backend, sim, prompts[i:i + step], cfg, seed=cfg.seed + i, logprobs=False,
                        progress=progress and step >= len(prompts))
    return {**summarize(outs), "by_qtype": by_qtype(triples, outs)}, outs


class ServedClient(Wrapped):
    """An HTTP backend (`inner`) with the model's tokenizer, as rollouts need it: every
    conversation sends its own requests; `close` closes the client (and a server it started)."""

    def __init__(self, client, tokenizer, path) -> None:
        self.inner = self.client = client
        self.tokenizer, self.path = tokenizer, path
        self.holding = str(path)  # the model folder whose weights the server samples from
        self._publishing = threading.Lock()

    def publish(self, model) -> float:
        """`model`'s weights (a folder or prepared name) to the server (a vLLM server, as GRPO
        publishes its policy), so the next requests sample from them; the seconds it took."""
        import torch
        from transformers import AutoModelForCausalLM

        from generators.llm.model_store import resolve_model

        path = str(resolve_model(model))
        weights = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        seconds = self.client.load_weights(weights.named_parameters())
        self.holding = path
        return seconds

    def hold(self, model) -> None:
        """Publish `model` (a resolved folder path) unless the server holds it already; one
        caller at a time, as every conversation of a rollout asks at once."""
        with self._publishing:
            if self.holding != model:
                self.publish(model)


class OnServer(Wrapped):
    """One model's turn on a shared ServedClient, for several models that sample from one server
    (self-play's examiner, reader and student): before each generate call the model's weights
    are published unless the server already holds them. Closing it leaves the server running."""

    def __init__(self, served: ServedClient, model) -> None:
        from generators.llm.model_store import resolve_model

        self.inner = self.served = served
        self.model = str(resolve_model(model))
        self.tokenizer = served.tokenizer

    def before(self) -> None:
        self.served.hold(self.model)

    def close(self) -> None:
        pass


def eval_backend(cfg: EvalConfig):
    """The backend `cfg.backend` names, holding `cfg.model` (module docstring of each)."""
    return sampling_backend(cfg.backend, cfg.model, cfg.url, cfg.served_model, cfg.batch_size, cfg.turn_cache_mb)


BACKEND_KINDS = kinds_with(ROLLOUT)


def sampling_backend(kind: str, model, url: str = "", served_model: str = "policy", batch_size: int = 16,
                     turn_cache_mb: int = 1024, journal=None):
    """A backend for rollouts: `transformers` loads `model` here (turns in lockstep, each
    continuing from its KV cache); `vllm-server` starts vLLM's server from .venv-vllm with it
    (or talks to the one at `url`) and `openai` talks to any OpenAI-compatible server at `url`,
    both with `model`'s tokenizer and every conversation in flight at once. `journal`
    (storage.journal.Journal): where `openai` keeps every answer it paid for."""
    from generators.llm.model_store import resolve_model

    if kind == "transformers":
        from generators.llm.transformers_backend import TransformersBackend

        return TransformersBackend(model, batch_size=batch_size, turn_cache_mb=turn_cache_mb)
    require(kind, "--rollout-backend", ROLLOUT)
    from transformers import AutoTokenizer

    path = resolve_model(model)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if kind == "openai":
        if not url:
            raise ValueError("--rollout-backend openai needs --base-url (the server's address)")
        from generators.llm.openai_backend import OpenAIBackend

        return ServedClient(OpenAIBackend(url, served_model, journal=journal), tokenizer, path)
    from generators.llm.vllm_server import VLLMServer
    from train.weight_sync import ServedEngine

    # a server that dies stops the work with its exit code and log (ServedEngine)
    served = ServedClient(ServedEngine(VLLMServer(path, url=url or None)), tokenizer, path)
    if url:  # a running server may hold other weights than `model`'s
        served.holding = None
    return served


def check_sampling(kind: str, model, url: str = "") -> None:
    """A rollout backend's options checked before anything loads (one-line ValueError): a
    known --rollout-backend, --base-url for openai, a --model that is a model folder or a prepared name
    (every kind reads its tokenizer)."""
    from generators.llm.model_store import check_model

    require(kind, "--rollout-backend", ROLLOUT)
    if kind == "openai" and not url:
        raise ValueError("--rollout-backend openai needs --base-url (the server's address)")
    check_model(model)


def check_eval(cfg: EvalConfig, root) -> None:
    """The options of an evaluation and what they name, before a model loads: --dataset with
    triples, a --hold-out file, the backend and the model."""
    from storage.reader import require_rows

    if not cfg.data:
        raise ValueError("--dataset is required")
    require_rows(root, cfg.data, "triples", "--dataset")
    if cfg.hold_out and not os.path.isfile(cfg.hold_out):
        raise ValueError(f"--hold-out: no such file: {cfg.hold_out}")
    check_sampling(cfg.backend, cfg.model, cfg.url)


def run_eval(cfg: EvalConfig, data_root=None, progress: bool = True, warn=None) -> dict:
    """Load `cfg.model` with `cfg.backend` and evaluate it; the summary dict. A warning about the
    model (train.sft.turn_warning) goes to `warn` before the evaluation starts and into the
    summary's `warnings`."""
    from storage import resolve_root

    check_eval(cfg, resolve_root(data_root))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from train.sft import turn_warning

    backend = eval_backend(cfg)
    warning = turn_warning(backend.path, cfg.max_new_tokens)
    if warning and warn is not None:
        warn(warning)
    try:
        summary, _ = evaluate(backend, resolve_root(data_root), cfg, progress)
    finally:
        backend.close()
    return {**summary, "model": str(backend.path), "config": asdict(cfg), "warnings": [warning] if warning else []}

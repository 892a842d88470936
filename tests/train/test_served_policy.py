"""GRPO with the policy served by vLLM's server (`--rollout-backend vllm-server`): a real
server from .venv-vllm on 127.0.0.1, real HTTP, the trainer in this process.

The `vllm_server` tests need .venv-vllm (`make vllm-env`); .ci/run builds it and runs them
with FORGEPLAY_REQUIRE_VLLM=1, which turns their skip into a failure. They share one server
on the tiny random Llama (tied LM head); the last test kills it.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from generators.llm.base import ChatRequest
from generators.llm.server_load import metrics_url, parse_load
from generators.llm.vllm_server import ServerError, VLLMServer, server_command, server_env, vllm_python, worker_cores
from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401 (fixtures)
from train.configs import GRPOConfig
from train.grpo import build_session
from train.prefix import plain_token_logprobs
from train.trainer import Trainer, TrainConfig, read_metrics
from train.weight_sync import check_rollout_backend


def test_missing_vllm_environment_says_what_to_run(tmp_path, monkeypatch):
    with pytest.raises(ServerError, match="run `make vllm-env`") as e:
        vllm_python(str(tmp_path / "nope" / "python"))
    assert "\n" not in str(e.value)
    monkeypatch.setenv("FORGEPLAY_VLLM_PYTHON", str(tmp_path / "nope" / "python"))
    with pytest.raises(ServerError, match="make vllm-env"):  # checked before any model is loaded
        check_rollout_backend(GRPOConfig(rollout_backend="vllm-server"))
    check_rollout_backend(GRPOConfig(rollout_backend="vllm-server", rollout_url="http://127.0.0.1:8000"))


def test_port_in_use_is_one_line(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        server = VLLMServer(tmp_path, port=port)
        with pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is already in use") as e:
            server.start()
    assert "\n" not in str(e.value) and server.proc is None


def test_the_worker_takes_the_cores_but_one_shared_among_model_processes(monkeypatch):
    """The engine's worker is bound to its share of the cores; one is left to the scheduler;
    --threads / FORGEPLAY_THREADS fix the count; the server runs in eager mode."""
    monkeypatch.delenv("FORGEPLAY_THREADS", raising=False)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5, 6, 7, 8})
    monkeypatch.setattr("generators.llm.vllm_server.available_cores", lambda: 9)
    assert worker_cores(busy_others=0) == [0, 1, 2, 3, 4, 5, 6, 7]  # the last core: the scheduler's
    assert worker_cores(busy_others=1) == [0, 1, 2, 3]
    assert worker_cores(busy_others=20) == [0]
    assert worker_cores(threads=2, busy_others=0) == [0, 1]
    monkeypatch.setattr("generators.llm.vllm_server.available_cores", lambda: 3)  # a CPU quota
    assert worker_cores(busy_others=0) == [0, 1]
    monkeypatch.setenv("FORGEPLAY_THREADS", "3")
    assert worker_cores(busy_others=5) == [0, 1, 2]
    assert server_env(cores=[0, 1])["VLLM_CPU_OMP_THREADS_BIND"] == "0,1"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # the user's own binding wins
    assert server_env(cores=[0, 1])["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert "--enforce-eager" in server_command(Path("python"), "m", 1, None, 0, "float32")


# ---- a real server ---------------------------------------------------------------------------


def _session(root, path, backend: str, out: str = ""):
    """A GRPO session on the tiny model with a one-line system prompt (the real one lists
    the tools, ~3.6k tokens, which only makes every pass slower here)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    cfg = GRPOConfig(data="w", group_size=2, limit=2, max_turns=2, max_new_tokens=12, rollout_backend=backend,
                     vllm_max_model_len=1024, out=out)
    s = build_session(root, cfg, path, model)
    system = {"role": "system", "content": "Answer inside <answer></answer>."}
    s.prompts = [replace(p, messages=[system, p.messages[-1]]) for p in s.prompts]
    return s, model


@pytest.fixture(scope="module")
def served(world_root, tiny_llama_dir, tmp_path_factory):
    s, model = _session(world_root, tiny_llama_dir, "vllm-server", str(tmp_path_factory.mktemp("run")))
    yield s, model
    s.backend.close()


def _trainer_logprobs(model, ids: list[int], pad: int) -> torch.Tensor:
    with torch.no_grad():
        return plain_token_logprobs(model, [ids], pad)[0, 1:].cpu()


@pytest.mark.vllm_server
def test_reloaded_server_computes_the_trainers_logprobs(served):
    """After a publish the server's log-probabilities of a fixed text equal the trainer's
    teacher-forced ones, also after optimizer steps that move the tied embedding / LM head;
    and they are no longer what the server computed before."""
    s, model = served
    be, server = s.backend, s.backend.engine.server
    assert model.lm_head.weight is model.model.embed_tokens.weight  # the tied head
    ids = be.tokenizer(" ".join(f"fact {i}: the sky is blue." for i in range(40)))["input_ids"]
    assert be.sync(model, 0) is True and be.sync(model, 0) is False  # published once, not again unchanged
    before = torch.tensor(server.prompt_logprobs(ids)[1:])
    assert before == pytest.approx(_trainer_logprobs(model, ids, be.pad_id), abs=1e-3)
    be.generate([ChatRequest(messages=[{"role": "user", "content": "fact 0"}], temperature=0.0, max_tokens=4)])

    embed = model.model.embed_tokens.weight.detach().clone()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(3):
        loss = -plain_token_logprobs(model, [ids], be.pad_id)[0, 1:].mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert float((model.model.embed_tokens.weight.detach() - embed).abs().max()) > 1e-3
    assert be.sync(model, 3) is True and be.policy_version == 3
    after = torch.tensor(server.prompt_logprobs(ids)[1:])
    assert after == pytest.approx(_trainer_logprobs(model, ids, be.pad_id), abs=1e-3)
    assert float((after - before).abs().max()) > 0.05
    assert len(list(server.work.glob("weights-*.safetensors"))) == 1  # the older file is gone
    assert not list(server.work.glob("*.tmp"))
    # the server's engine processes count as model processes while they run
    from generators.llm.cores import descendants, live_processes

    tree = set(descendants(server.proc.pid))
    assert len(tree) >= 2 and tree <= set(live_processes())
    # its worker computes on the cores it was given, which leave one to the scheduler
    assert server.cores and len(server.cores) <= max(1, len(os.sched_getaffinity(0)) - 1)
    assert any(os.sched_getaffinity(pid) == set(server.cores) for pid in tree)


@pytest.mark.vllm_server
def test_grpo_with_served_policy_and_with_transformers(served, world_root, tiny_llama_dir, tmp_path):
    """Same seed, tiny model: both complete the same steps with sane metrics; the served
    rollouts record the optimizer step of the weights that sampled each turn."""
    runs = {}
    for name in ("vllm-server", "transformers"):
        s, model = served if name == "vllm-server" else _session(world_root, tiny_llama_dir, name)
        trainer = Trainer(model, TrainConfig(max_steps=2, batch_size=2, lr=1e-3, checkpoint_every=0, seed=0),
                          tmp_path / name, s.step)
        s.attach(trainer)
        trainer.fit(s.prompts, progress=False)
        runs[name] = read_metrics(tmp_path / name)
    for recs in runs.values():
        assert [r["step"] for r in recs] == [1, 2]
        assert all(math.isfinite(r["loss"]) and r["tokens"] > 0 and 0.0 <= r["reward"] <= 1.1 for r in recs)
        # step k samples with the weights of step k - 1, and no turn of a rollout with older ones
        assert [r["policy_version"] for r in recs] == [0, 1] and all(r["stale_turns"] == 0 for r in recs)
    assert served[0].backend.syncs >= 2


@pytest.mark.vllm_server
def test_a_server_reached_by_its_url_is_sent_weights_from_a_new_folder(served, tmp_path):
    """`--base-url`: the trainer's client of a running server writes the weights it sends
    into OUT/served-rank0, a folder no one has made yet (the first publish failed there), and
    deletes them on close without stopping the server it did not start."""
    from train.weight_sync import named_weights

    s, model = served
    folder = tmp_path / "out" / "served-rank0"
    client = VLLMServer(s.backend.engine.server.model_dir, url=s.backend.engine.server.url, work_dir=folder).start()
    client.publish(named_weights(model))
    ids = s.backend.tokenizer("the sky is blue over the harbour")["input_ids"]
    assert torch.tensor(client.prompt_logprobs(ids)[1:]) == pytest.approx(
        _trainer_logprobs(model, ids, s.backend.pad_id), abs=1e-3)
    assert [p.name for p in folder.iterdir()] == ["weights-1.safetensors"]
    client.close()  # the weights it sent (a copy of the model) go; the folder it was given stays
    assert folder.is_dir() and not list(folder.iterdir())
    temporary = VLLMServer(s.backend.engine.server.model_dir, url=s.backend.engine.server.url).start()
    temporary.publish(named_weights(model))
    assert temporary.own_work and list(temporary.work.glob("weights-*.safetensors"))
    watcher = temporary.watcher  # would delete the folder, were this process killed
    assert watcher is not None and watcher.poll() is None
    temporary.close()  # a folder of its own goes whole, and its watcher with it
    assert not temporary.work.exists() and watcher.poll() is not None
    assert client.url == s.backend.engine.server.url and s.backend.engine.server.proc.poll() is None


@pytest.mark.vllm_server
def test_seeded_sampling_of_many_long_prompts_at_once(served):
    """Sixteen seeded requests at temperature 1 whose prompts together are more than one engine
    step takes: vllm-cpu's chunked prefill crashed the engine on them ("CPU Generator does not
    use offset"), so the server runs with whole prefills; every request gets its tokens, and
    the same seed gives the same reply. The server states its load, and the client reads it."""
    s, _ = served
    text = " ".join(f"fact {i}: the river {i} runs north." for i in range(60))  # about 700 tokens
    reqs = [ChatRequest(messages=[{"role": "user", "content": f"{i} {text}"}], temperature=1.0, max_tokens=6,
                        seed=i) for i in range(16)]
    outs = s.backend.generate(reqs)
    assert len(outs) == 16 and all(o and o[0].completion_tokens > 0 for o in outs)
    again = s.backend.generate(reqs[:2])
    assert [o[0].text for o in again] == [o[0].text for o in outs[:2]]
    # the server states its load at /metrics, and the client sizes its requests in flight by it
    server, client = s.backend.engine.server, s.backend.engine.client
    with urllib.request.urlopen(metrics_url(server.url + "/v1"), timeout=5) as r:
        assert parse_load(r.read().decode()) is not None
    many = [replace(r, seed=100 + i, max_tokens=32) for i in range(4) for r in reqs]  # (a batch that lasts seconds)
    assert len(s.backend.generate(many)) == 64
    assert client.fixed is None and client.limits[0].reported and not client._unread


@pytest.mark.vllm_server
def test_server_dying_mid_batch_fails_with_its_log(served):
    """Killed while rollouts are in flight: the stage stops with an error naming the server
    and its log, and nothing is returned half done."""
    from train.rollout import rollout

    s, model = served
    server = s.backend.engine.server
    assert server.registered
    long = replace(s.cfg, max_new_tokens=400, max_turns=1)
    result: dict = {}

    def run():
        try:
            result["outs"] = rollout(s.backend, s.simulator, s.prompts * 8, long, seed=1, logprobs=False)
        except Exception as e:  # noqa: BLE001 (the test inspects it)
            result["error"] = e

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 120
    while t.is_alive() and time.monotonic() < deadline:  # killed while its requests run, not before them
        with urllib.request.urlopen(metrics_url(server.url + "/v1"), timeout=5) as r:
            load = parse_load(r.read().decode())
        if load is not None and load.running > 0:
            break
        time.sleep(0.05)
    os.killpg(server.proc.pid, signal.SIGKILL)
    t.join(timeout=300)
    assert "outs" not in result
    err = result["error"]
    assert isinstance(err, ServerError) and server.url in str(err) and str(server.log) in str(err)
    from generators.llm.cores import live_processes

    gone = {int(f.stem) for f in server.registered}
    for _ in range(100):  # SIGKILLed processes exit within moments
        if not gone & set(live_processes()):
            break
        time.sleep(0.1)
    assert not gone & set(live_processes())  # dead: no longer counted

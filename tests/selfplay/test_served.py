"""Self-play sampling from one vLLM server (`--rollout-backend vllm-server`): a real server
from .venv-vllm on 127.0.0.1, real HTTP, a tiny random Llama in every role. Each role's
weights are published to the server before it samples (train.evaluate.OnServer), so a
trained iteration's next phases sample from the updated checkpoints. Both tests talk to one
server this module starts (the self-play run by `--base-url`), as a user with a server
running would: whatever weights it holds, each role publishes its own before sampling."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from transformers import AutoModelForCausalLM

from generators.corpus.build import WorldConfig, write
from generators.llm.base import ChatRequest
from generators.llm.vllm_server import VLLMServer
from generators.tools.base import base_rows
from generators.tools.simulator import Simulator
from selfplay.phases import replay_conversations, replay_examine
from selfplay.play import PlayConfig, run_id
from selfplay.warmstart import EXAMINER_TOOL, demonstrations
from storage import load_table
from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401 (fixtures)
from train.evaluate import OnServer, sampling_backend

pytestmark = pytest.mark.vllm_server


@pytest.fixture(scope="module")
def server_url(tiny_llama_dir):  # noqa: F811
    with VLLMServer(tiny_llama_dir) as server:
        yield server.url


def _other(src, dst):
    """A copy of the tiny model with other weights (its embeddings, tied to the LM head, shuffled)."""
    shutil.copytree(src, dst)
    model = AutoModelForCausalLM.from_pretrained(dst)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb.copy_(emb[torch.randperm(emb.shape[0], generator=torch.Generator().manual_seed(0))])
    model.save_pretrained(dst)
    return dst


def test_each_model_samples_its_own_weights_from_one_server(tiny_llama_dir, tmp_path, server_url):  # noqa: F811
    other = _other(tiny_llama_dir, tmp_path / "other")
    served = sampling_backend("vllm-server", str(tiny_llama_dir), url=server_url)
    try:
        ask = [ChatRequest(messages=[{"role": "user", "content": "Name a city."}], n=1, temperature=0.0, max_tokens=12)]
        first, second = OnServer(served, str(tiny_llama_dir)), OnServer(served, str(other))
        a = first.generate(ask)[0][0].token_ids
        b = second.generate(ask)[0][0].token_ids
        assert served.holding == second.model
        assert first.generate(ask)[0][0].token_ids == a and served.holding == first.model
        assert a != b  # the second model's weights were sampled from, not the first's
        published, publish = [], served.publish
        served.publish = lambda model: published.append(model) or publish(model)
        with ThreadPoolExecutor(8) as pool:  # every conversation of a rollout asks at once
            outs = list(pool.map(lambda _: second.generate(ask)[0][0].token_ids, range(8)))
        assert published == [second.model] and outs == [b] * 8
    finally:
        served.close()


def test_a_trained_iteration_samples_every_role_from_one_server(tmp_path, tiny_llama_dir, monkeypatch,  # noqa: F811
                                                               server_url):
    from flows.selfplay import run_selfplay

    def no_local_sampling(*a, **kw):
        raise AssertionError("a role sampled in this process, not on the server")

    monkeypatch.setattr("generators.llm.transformers_backend.TransformersBackend.__init__", no_local_sampling)

    root = tmp_path
    write(WorldConfig(seed=3, entities=200), root, "w")
    docs, triples = load_table("w", "documents", root).to_pylist(), load_table("w", "triples", root).to_pylist()
    tools = base_rows()
    demos = demonstrations(docs, triples, Simulator(docs, seed=0, tools=tools),
                           next(t for t in tools if t["name"] == EXAMINER_TOOL), n=3)[0]
    cfg = PlayConfig(dataset="w", examiner=str(tiny_llama_dir), student=str(tiny_llama_dir), tasks=len(demos),
                     attempts=2, student_turns=2, max_new_tokens=12, batch_size=8, checkpoints=str(root / "ck"),
                     examiner_steps=1, student_steps=1, update_batch=2, lr=1e-3, warmstart=False, iterations=2,
                     rollout_backend="vllm-server", rollout_url=server_url)
    replay_examine(root, cfg, run_id(cfg, root), 0, replay_conversations(demos, docs), docs)
    summary = run_selfplay(PlayConfig(**{**cfg.__dict__, "resume": True}), root, progress=False)
    assert run_id(cfg, root) == run_id(PlayConfig(**{**cfg.__dict__, "rollout_backend": "transformers"}), root)
    first, second = summary["iterations"]
    assert first["attempts"] == 2 * len(demos)  # sampled on the server by the starting student
    assert second["examiner_outputs"] == cfg.tasks  # the updated examiner sampled on the server
    rows = [json.loads(r["meta"]) for r in load_table("w_selfplay", "rollouts", root).to_pylist()]
    assert sum(m["role"] == "examiner" for m in rows) >= cfg.tasks
    assert summary["models"]["student"].startswith(cfg.checkpoints)

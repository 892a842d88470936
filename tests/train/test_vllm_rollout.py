"""GRPO with rollouts sampled by an in-process vLLM engine whose weights follow the trainer
(train/weight_sync.py, VLLMBackend.load_weights).

The `vllm`-marked tests run only in the vllm virtualenv (.ci/run):

    VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python -m pytest tests/train/test_vllm_rollout.py -m vllm -q

They share one engine (module fixture; an in-process engine for the tiny random Llama starts
in seconds) and take about a minute together on 2 busy cores. The unmarked tests (backend
choice, the weights-changed check) run in the main suite.
"""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from generators.llm.base import ChatRequest
from train.configs import GRPOConfig
from train.grpo import build_session
from train.prefix import plain_token_logprobs
from train.rollout import rollout
from train.trainer import Trainer, TrainConfig, read_metrics
from train.weight_sync import check_rollout_backend, weights_version


def test_rollout_backend_choice_is_checked():
    with pytest.raises(ValueError, match="unknown --rollout-backend 'sglang': choose one of transformers, vllm, vllm-server"):
        check_rollout_backend(GRPOConfig(rollout_backend="sglang"))
    check_rollout_backend(GRPOConfig())
    if importlib.util.find_spec("vllm") is None:  # the main virtualenv: say how to get vllm
        with pytest.raises(ValueError, match="vllm_env.sh"):
            check_rollout_backend(GRPOConfig(rollout_backend="vllm"))
    else:
        check_rollout_backend(GRPOConfig(rollout_backend="vllm"))


def test_weights_version_changes_with_optimizer_steps_only(tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    v0 = weights_version(model)
    loss = model(input_ids=torch.tensor([[5, 6, 7, 8]]), labels=torch.tensor([[5, 6, 7, 8]])).loss
    loss.backward()
    assert weights_version(model) == v0  # forward/backward write no parameter
    opt.step()
    v1 = weights_version(model)
    assert v1 > v0
    model.load_state_dict(AutoModelForCausalLM.from_pretrained(tiny_llama_dir).state_dict())
    assert weights_version(model) > v1  # a restored checkpoint counts as a change too


# ---- vLLM ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def session(world_root, tiny_llama_dir):
    """A GRPO session with vLLM rollouts on the tiny random Llama. Its prompts keep the
    questions but get a one-line system prompt: the real one lists the tools (~3.6k tokens),
    which only makes every forward pass slower here."""
    from dataclasses import replace

    from transformers import AutoModelForCausalLM

    root = world_root
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    cfg = GRPOConfig(data="w", group_size=2, limit=2, max_turns=2, max_new_tokens=12, rollout_backend="vllm")
    s = build_session(root, cfg, tiny_llama_dir, model)
    system = {"role": "system", "content": "Answer inside <answer></answer>."}
    s.prompts = [replace(p, messages=[system, p.messages[-1]]) for p in s.prompts]
    yield s, model
    s.backend.close()


def _vllm_prompt_logprobs(engine, ids: list[int]) -> torch.Tensor:
    """vLLM's log-probability of each prompt token after the ones before it."""
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=0)
    out = engine.llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0]
    return torch.tensor([d[t].logprob for d, t in zip(out.prompt_logprobs[1:], ids[1:])])


def _torch_prompt_logprobs(model, ids: list[int], pad: int) -> torch.Tensor:
    with torch.no_grad():
        return plain_token_logprobs(model, [ids], pad)[0, 1:].cpu()


@pytest.mark.vllm
def test_grpo_step_with_vllm_rollouts(session, tmp_path):
    s, model = session
    recs = Trainer(model, TrainConfig(max_steps=1, batch_size=2, lr=1e-3, checkpoint_every=0), tmp_path,
                   s.step).fit(s.prompts, progress=False)
    [rec] = read_metrics(tmp_path)
    assert rec == recs[0] and math.isfinite(rec["loss"]) and rec["tokens"] > 0 and 0.0 <= rec["reward"] <= 1.1
    assert s.backend.syncs == 1 and s.backend.engine.in_process  # the first rollouts pushed the trainer's weights
    # the "old" logprobs of a rollout are the trainer module's, teacher-forced, on the policy's tokens
    outs = rollout(s.backend, s.simulator, [s.prompts[0]] * 2, s.cfg, seed=11)
    lp = plain_token_logprobs(model, [o.token_ids for o in outs], s.backend.pad_id)
    for o, row in zip(outs, lp):
        assert sum(o.mask) > 0 and len(o.logprobs) == len(o.token_ids)
        want = [float(v) if m else 0.0 for v, m in zip(row[:len(o.token_ids)].detach(), o.mask)]
        assert o.logprobs == pytest.approx(want, abs=1e-4)


@pytest.mark.vllm
def test_synced_engine_follows_an_optimizer_step(session):
    """After an update + sync the engine computes what the trainer's module computes (prompt
    logprobs, sampled-token logprobs, greedy tokens), and no longer what it computed before,
    also for a prompt whose KV blocks were cached before the update."""
    s, model = session
    be = s.backend
    be.sync(model)
    messages = [{"role": "user", "content": " ".join(f"fact {i}: the sky is blue." for i in range(80))}]
    ids = be.engine.encode_chat(messages)
    assert len(ids) > 500  # several KV cache blocks, which the prefix cache keeps
    before = _vllm_prompt_logprobs(be.engine, ids)
    assert before == pytest.approx(_torch_prompt_logprobs(model, ids, be.pad_id), abs=1e-3)
    greedy = ChatRequest(messages=messages, temperature=0.0, max_tokens=6)
    be.generate([greedy])  # fills the prefix cache with KV blocks of the old weights

    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    target = ids + be.tokenizer(" Paris", add_special_tokens=False)["input_ids"]
    loss = -plain_token_logprobs(model, [target], be.pad_id)[0, len(ids):].mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    assert be.sync(model) is True and be.sync(model) is False  # pushed once, not again without a change

    after = _vllm_prompt_logprobs(be.engine, ids)
    assert after == pytest.approx(_torch_prompt_logprobs(model, ids, be.pad_id), abs=1e-3)
    assert float((after - before).abs().max()) > 0.05

    [[new]] = be.generate([greedy])
    with torch.no_grad():
        seq = list(ids)
        for _ in range(len(new.token_ids)):
            seq.append(int(model(input_ids=torch.tensor([seq])).logits[0, -1].argmax()))
    assert new.token_ids == seq[len(ids):]
    sampled = ChatRequest(messages=messages, temperature=1.0, seed=3, max_tokens=8, logprobs=True)
    [[c]] = be.generate([sampled])
    assert c.logprobs == pytest.approx(be.score(ids, c.token_ids), abs=1e-3)

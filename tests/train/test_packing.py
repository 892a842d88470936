"""Padding-free packed batches (train/packing.py) on a tiny random Llama: token-budget micro-
batches, the same loss and gradients as padded batches on conversations of mixed lengths (also
through the Trainer, where the step's loss stays the mean over every labelled token), no
attention across packed conversations, and padded batches (sampling, scoring) unchanged on a
model switched to packed attention."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from train.configs import TrainConfig
from train.packing import IGNORE, ATTENTION, pack, token_batches, use_packed_attention
from train.sft import make_step
from train.stages import SFT_LOSS_WEIGHT
from train.trainer import Trainer, read_metrics


def examples(lengths=(37, 5, 120, 64, 18, 90, 9, 51)) -> list[dict]:
    """Conversations of mixed lengths, each labelled on a different share of its tail."""
    g = torch.Generator().manual_seed(11)
    out = []
    for i, n in enumerate(lengths):
        ids = torch.randint(5, 4000, (n,), generator=g).tolist()
        cut = max(1, n - 1 - (i * 13) % (n - 1))
        out.append({"input_ids": ids, "labels": [IGNORE] * cut + ids[cut:]})
    return out


def load(tiny_llama_dir, packed: bool):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    if packed:
        use_packed_attention(model)
    return model


def loss_and_grads(model, step, data) -> tuple[float, dict]:
    model.zero_grad()
    loss, stats = step(model, data)
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters()}, stats


def test_token_batches_fill_rows_up_to_the_budget():
    lengths = [50, 10, 700, 30, 45, 20, 5, 60]
    groups = token_batches(lengths, 100)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert [700] in [[lengths[i] for i in g] for g in groups]  # longer than the budget: alone
    assert all(sum(lengths[i] for i in g) <= 100 for g in groups if g != [2])
    assert len(groups) == 4  # 700 | 60+30+10 | 50+45+5 | 20: first-fit, longest first
    with pytest.raises(ValueError, match="max-batch-tokens"):
        token_batches(lengths, 0)


def test_pack_restarts_positions_and_unlabels_each_first_token():
    data = examples((4, 3))
    data[1]["labels"] = list(data[1]["input_ids"])  # fully labelled, first token included
    b = pack(data)
    assert b["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1, 2]]
    assert b["input_ids"][0].tolist() == data[0]["input_ids"] + data[1]["input_ids"]
    assert b["labels"][0, 4] == IGNORE  # no conversation predicts the next one's first token


def test_packed_and_padded_batches_give_the_same_loss_and_gradients(tiny_llama_dir):
    data = examples()
    padded = load(tiny_llama_dir, packed=False)
    packed = load(tiny_llama_dir, packed=True)
    assert packed.config._attn_implementation == ATTENTION
    l1, g1, s1 = loss_and_grads(padded, make_step(0, packed=False), data)
    l2, g2, s2 = loss_and_grads(packed, make_step(0, packed=True), data)
    assert l2 == pytest.approx(l1, rel=1e-5)
    assert s2["trained_tokens"] == s1["trained_tokens"]
    assert s2["tokens"] == s1["tokens"] == sum(len(e["input_ids"]) for e in data)  # no padding in either count
    for n in g1:
        assert torch.allclose(g2[n], g1[n], rtol=1e-4, atol=1e-6), n


def test_packed_conversations_do_not_attend_to_each_other(tiny_llama_dir):
    model = load(tiny_llama_dir, packed=True).eval()
    a, b = examples((30, 25))
    other = {**a, "input_ids": [t + 1 for t in a["input_ids"]]}
    with torch.no_grad():
        first = model(**{k: v for k, v in pack([a, b]).items() if k != "labels"}).logits[0, 30:]
        second = model(**{k: v for k, v in pack([other, b]).items() if k != "labels"}).logits[0, 30:]
        alone = model(input_ids=torch.tensor([b["input_ids"]])).logits[0]
    assert torch.allclose(first, second, atol=1e-5) and torch.allclose(first, alone, atol=1e-4)


def test_padded_batches_are_unchanged_on_a_packed_model(tiny_llama_dir):
    """Sampling and scoring pass padded rows with a mask (and a KV cache): transformers' sdpa path."""
    plain, packed = load(tiny_llama_dir, False).eval(), load(tiny_llama_dir, True).eval()
    ids = torch.randint(5, 4000, (3, 12), generator=torch.Generator().manual_seed(2))
    att = torch.ones_like(ids)
    att[0, :5] = 0  # left padding, as for generation
    with torch.no_grad():
        want = plain(input_ids=ids, attention_mask=att).logits
        got = packed(input_ids=ids, attention_mask=att).logits
        cache_want = plain(input_ids=ids, attention_mask=att, use_cache=True).past_key_values
        cache_got = packed(input_ids=ids, attention_mask=att, use_cache=True).past_key_values
        nxt = torch.full((3, 1), 7)
        att2 = torch.cat([att, torch.ones((3, 1), dtype=att.dtype)], dim=1)
        step_want = plain(input_ids=nxt, attention_mask=att2, past_key_values=cache_want).logits
        step_got = packed(input_ids=nxt, attention_mask=att2, past_key_values=cache_got).logits
    mask = att.bool()
    assert torch.allclose(got[mask], want[mask], atol=1e-5)
    assert torch.allclose(step_got, step_want, atol=1e-5)


def test_trainer_token_budget_micro_batches_keep_the_global_token_mean(tiny_llama_dir, tmp_path):
    """One step of 8 conversations: packed into micro-batches of at most 128 tokens, and padded
    in one micro-batch of 8, give the same loss and gradients."""
    data = examples()
    cfg = dict(max_steps=1, lr=1e-3, batch_size=8, schedule="constant", checkpoint_every=0)
    runs = {}
    for name, packed, budget in (("padded", False, 0), ("packed", True, 128)):
        model = load(tiny_llama_dir, packed)
        grads: dict = {}
        t = Trainer(model, TrainConfig(**cfg, max_batch_tokens=budget), tmp_path / name, make_step(0, packed),
                    on_step=lambda rec, m=model, g=grads: g.update({n: p.grad.clone() for n, p in m.named_parameters()}),
                    loss_weight=SFT_LOSS_WEIGHT, lengths=[len(e["input_ids"]) for e in data])
        t.fit(data, progress=False)
        runs[name] = (read_metrics(tmp_path / name)[0], grads)
    (padded, g1), (packed, g2) = runs["padded"], runs["packed"]
    assert padded["micro_batches"] == 1 and packed["micro_batches"] == 4  # 120+5 | 90+37 | 64+51+9 | 18
    assert packed["batch"] == padded["batch"] and packed["trained_tokens"] == padded["trained_tokens"]
    assert packed["loss"] == pytest.approx(padded["loss"], rel=1e-5)
    assert packed["peak_mem_gb"] > 0 and packed["tokens_per_s"] > 0
    for n in g1:
        assert torch.allclose(g2[n], g1[n], rtol=1e-4, atol=1e-6), n

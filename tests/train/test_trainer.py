"""Trainer + atomic checkpoints: resume after stopping equals an uninterrupted run (tiny
random-weight Llama, real AdamW/schedule/accumulation), and a failed write never becomes
`latest`."""


import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from train import checkpoint
from train.trainer import Trainer, TrainConfig, plot_metrics, read_metrics


def tiny_model() -> LlamaForCausalLM:
    torch.manual_seed(1)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64)
    return LlamaForCausalLM(cfg)


def examples(n=23, length=12):
    g = torch.Generator().manual_seed(7)
    return [torch.randint(0, 64, (length,), generator=g) for _ in range(n)]


def lm_step(model, batch):
    ids = torch.stack(batch)
    out = model(input_ids=ids, labels=ids)
    return out.loss, {"tokens": ids.numel()}


CFG = dict(max_steps=8, lr=3e-3, warmup_steps=2, schedule="cosine", batch_size=3, grad_accum=2,
           checkpoint_every=4, seed=5, weight_decay=0.01)


def test_resume_equals_uninterrupted_run(tmp_path):
    data = examples()
    full = Trainer(tiny_model(), TrainConfig(**CFG), tmp_path / "full", lm_step)
    full_recs = full.fit(data, progress=False)

    # first half, then a brand-new process state (fresh model, fresh trainer, other RNG use)
    part = Trainer(tiny_model(), TrainConfig(**CFG), tmp_path / "part", lm_step)
    part.fit(data, progress=False, stop_after=4)
    torch.manual_seed(999)  # anything the resumed run does not restore would now differ
    resumed = Trainer(tiny_model(), TrainConfig(**{**CFG, "resume": True}), tmp_path / "part", lm_step)
    resumed.fit(data, progress=False)

    a, b = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "part")
    assert [r["step"] for r in b] == list(range(1, 9))
    # identical data order: no batch skipped or repeated; the epochs (23 examples) wrap
    assert [r["batch"] for r in a] == [r["batch"] for r in b]
    used = [i for r in a for i in r["batch"]]
    assert len(used) == 8 * 6 and sorted(used[:23]) == list(range(23))
    assert [r["loss"] for r in a] == pytest.approx([r["loss"] for r in b], rel=1e-5, abs=1e-6)
    assert a[-1]["loss"] < a[0]["loss"]  # it learns
    for (n1, p1), (n2, p2) in zip(full.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.allclose(p1, p2, atol=1e-6), n1
    assert full_recs[-1]["tokens"] == 6 * 12
    assert plot_metrics(tmp_path / "full", ("loss", "lr")).stat().st_size > 1000


def test_order_kinds_lets_the_kinds_take_turns_and_resumes_exactly(tmp_path):
    """`--order kinds`: every epoch holds every example once, each run of as many steps as there
    are kinds holds every kind (three kinds of 12, 6 and 5 examples: the first 15 indices hold 5 of
    each), the kinds keep the order the seed's permutation gives them, and a resumed run takes the
    same batches; a stage without kinds, or an unknown order, is refused."""
    data = examples()
    kinds = ["a"] * 12 + ["b"] * 6 + ["c"] * 5
    cfg = {**CFG, "batch_size": 5, "grad_accum": 1, "order": "kinds", "max_steps": 6, "checkpoint_every": 3}
    full = Trainer(tiny_model(), TrainConfig(**cfg), tmp_path / "full", lm_step, kinds=kinds)
    full.fit(data, progress=False)
    part = Trainer(tiny_model(), TrainConfig(**cfg), tmp_path / "part", lm_step, kinds=kinds)
    part.fit(data, progress=False, stop_after=3)
    resumed = Trainer(tiny_model(), TrainConfig(**{**cfg, "resume": True}), tmp_path / "part", lm_step, kinds=kinds)
    resumed.fit(data, progress=False)
    used = [i for r in read_metrics(tmp_path / "full") for i in r["batch"]]
    assert used == [i for r in read_metrics(tmp_path / "part") for i in r["batch"]]
    first, second = used[:23], used[23:]
    assert sorted(first) == list(range(23)) and first != second[:len(first)]
    assert sorted(kinds[i] for i in first[:15]) == ["a"] * 5 + ["b"] * 5 + ["c"] * 5
    assert all(len({kinds[i] for i in first[k:k + 3]}) == 3 for k in range(0, 15, 3))  # one of each kind a turn
    shuffled = Trainer(tiny_model(), TrainConfig(**{**cfg, "order": "shuffle"}), tmp_path / "s", lm_step, kinds=kinds)
    perm = shuffled._order(23, 0).tolist()
    assert [i for i in perm if kinds[i] == "a"] == [i for i in first if kinds[i] == "a"]  # each kind's own order kept
    with pytest.raises(ValueError, match="--order kinds: this stage's examples have no kinds"):
        Trainer(tiny_model(), TrainConfig(**cfg), tmp_path / "x", lm_step)
    with pytest.raises(ValueError, match="--order must be one of shuffle, kinds"):
        Trainer(tiny_model(), TrainConfig(**{**cfg, "order": "sorted"}), tmp_path / "y", lm_step)


def test_resume_after_metrics_past_checkpoint_drops_them(tmp_path):
    data = examples()
    t = Trainer(tiny_model(), TrainConfig(**CFG), tmp_path, lm_step)
    t.fit(data, progress=False, stop_after=6)  # checkpoint at 4, metrics up to 6 (as after a kill)
    assert checkpoint.latest(tmp_path).name == "step-00000004"
    r = Trainer(tiny_model(), TrainConfig(**{**CFG, "resume": True}), tmp_path, lm_step)
    assert r.try_resume() and r.step == 4 and r.consumed == 4 * 6
    assert [m["step"] for m in read_metrics(tmp_path)] == [1, 2, 3, 4]


def test_failed_checkpoint_write_keeps_previous_latest(tmp_path, monkeypatch):
    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters())
    first = checkpoint.save(tmp_path, 1, model, opt, state={"consumed": 3})
    real_save = torch.save

    def failing(obj, path, *a, **k):
        if str(path).endswith("optimizer.pt"):
            raise OSError("disk full")
        return real_save(obj, path, *a, **k)

    monkeypatch.setattr(torch, "save", failing)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    with pytest.raises(OSError):
        checkpoint.save(tmp_path, 2, model, opt, state={"consumed": 6})
    monkeypatch.setattr(torch, "save", real_save)
    assert checkpoint.latest(tmp_path) == first
    assert not (tmp_path / "checkpoints" / "step-00000002").exists()
    assert not list((tmp_path / "checkpoints").glob(".step-*"))  # temp folder cleaned up
    fresh = tiny_model()
    state = checkpoint.restore(first, fresh)
    assert state == {"step": 1, "consumed": 3}
    assert not torch.equal(next(fresh.parameters()), next(model.parameters()))


def test_keeps_only_newest_checkpoints(tmp_path):
    model = tiny_model()
    for s in range(1, 5):
        checkpoint.save(tmp_path, s, model, keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*"))
    assert names == ["step-00000003", "step-00000004"]
    assert (tmp_path / "checkpoints" / "latest").read_text() == "step-00000004"

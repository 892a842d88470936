"""NEFTune: each conversation's embeddings get noise of at most alpha / sqrt(length x width),
padded or packed alike, padding none; alpha 0 changes nothing; the noise changes the loss and
the gradients, following torch's seed."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401 (fixtures)
from train.neftune import noisy_inputs, token_lengths
from train.packing import pack, use_packed_attention
from train.sft import collate, sft_loss

LONG, SHORT = 60, 15


@pytest.fixture()
def model(tiny_llama_dir):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)


def _examples():
    g = torch.Generator().manual_seed(1)
    return [{"input_ids": torch.randint(10, 500, (n,), generator=g).tolist(),
             "labels": torch.randint(10, 500, (n,), generator=g).tolist()} for n in (LONG, SHORT)]


def _noise(model, inputs, alpha):
    out = noisy_inputs(model, dict(inputs), alpha)
    return (out["inputs_embeds"] - model.get_input_embeddings()(inputs["input_ids"])).detach()


def test_each_conversation_gets_noise_of_its_own_length(model):
    alpha, width = 5.0, model.config.hidden_size
    bound = {n: alpha / (n * width) ** 0.5 for n in (LONG, SHORT)}
    padded = collate(_examples(), pad_id=0)
    assert token_lengths(padded)[1].tolist() == [SHORT] * SHORT + [0] * (LONG - SHORT)
    noise = _noise(model, {k: padded[k] for k in ("input_ids", "attention_mask")}, alpha)
    for row, n in enumerate((LONG, SHORT)):
        top = float(noise[row, :n].abs().max())
        assert 0.95 * bound[n] < top <= bound[n] * (1 + 1e-6), (n, top, bound[n])
    assert float(noise[1, SHORT:].abs().max()) == 0.0  # padding is left alone
    packed = pack(_examples())
    assert token_lengths(packed)[0].tolist() == [LONG] * LONG + [SHORT] * SHORT
    noise = _noise(model, {k: packed[k] for k in ("input_ids", "position_ids")}, alpha)
    for (s, e), n in zip(((0, LONG), (LONG, LONG + SHORT)), (LONG, SHORT)):
        top = float(noise[0, s:e].abs().max())
        assert 0.95 * bound[n] < top <= bound[n] * (1 + 1e-6), (n, top, bound[n])


def test_alpha_zero_changes_nothing_and_bad_alpha_is_refused(model):
    batch = collate(_examples(), pad_id=0)
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    assert noisy_inputs(model, inputs, 0.0) is inputs
    assert torch.equal(sft_loss(model, batch), sft_loss(model, batch, 0.0))
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match="finite number >= 0"):
            noisy_inputs(model, inputs, bad)


@pytest.mark.parametrize("packed", [False, True])
def test_noise_changes_the_loss_and_the_gradients(model, packed):
    if packed:
        use_packed_attention(model)
    batch = pack(_examples()) if packed else collate(_examples(), pad_id=0)

    def grads(alpha):
        model.zero_grad()
        torch.manual_seed(3)
        loss = sft_loss(model, batch, alpha)
        loss.backward()
        return float(loss), {n: p.grad.clone() for n, p in model.named_parameters()}

    clean, g_clean = grads(0.0)
    noisy, g_noisy = grads(5.0)
    assert grads(5.0)[0] == noisy  # the noise follows torch's seed
    assert abs(noisy - clean) > 1e-5
    assert set(g_noisy) == set(g_clean)
    assert any(not torch.allclose(g_noisy[n], g_clean[n]) for n in g_clean)


def test_a_bad_alpha_stops_sft_before_anything_is_loaded(tmp_path):
    from train.configs import SFTConfig, TrainConfig
    from train.stages import build_sft

    cfg = SFTConfig(data="none", model=str(tmp_path / "no-such-model"), neftune_alpha=-1.0)
    with pytest.raises(ValueError, match="--neftune-alpha must be a finite number >= 0, not -1.0"):
        build_sft(cfg, TrainConfig(), tmp_path)

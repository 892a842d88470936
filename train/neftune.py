"""NEFTune (Jain et al., 2023; TRL's `neftune_noise_alpha`): during SFT, uniform noise is added to
the input embeddings so a small dataset is not learnt token for token.

Each conversation's embeddings get noise drawn from U(-1, 1) scaled by alpha / sqrt(L * d), L its
own length in tokens and d the embedding width, so the noise's size does not depend on how the
conversations were batched: a padded batch (the padding gets none) and a packed row (one L per
conversation, read off `position_ids`) give each conversation the same scale.

    inputs = noisy_inputs(model, inputs, alpha)   # input_ids -> inputs_embeds
"""

from __future__ import annotations

import math

import torch


def token_lengths(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """[B, S] the length of the conversation each token belongs to (0 on padding)."""
    ids = inputs["input_ids"]
    if "attention_mask" in inputs:
        mask = inputs["attention_mask"]
        return mask * mask.sum(dim=1, keepdim=True)
    from train.packing import segments

    out = torch.empty_like(ids)
    for b, pos in enumerate(inputs["position_ids"].expand(ids.shape[0], -1)):
        for s, e in segments(pos) or [(0, pos.numel())]:
            out[b, s:e] = e - s
    return out


def check_alpha(alpha: float) -> float:
    """`alpha`, or ValueError when it is not a finite number >= 0."""
    if not math.isfinite(alpha) or alpha < 0:
        raise ValueError(f"--neftune-alpha must be a finite number >= 0, not {alpha}")
    return alpha


def noisy_inputs(model, inputs: dict[str, torch.Tensor], alpha: float) -> dict[str, torch.Tensor]:
    """`inputs` with `input_ids` replaced by the noised `inputs_embeds` (alpha 0: unchanged)."""
    if check_alpha(alpha) == 0:
        return inputs
    embeds = model.get_input_embeddings()(inputs["input_ids"])
    lengths = token_lengths(inputs).to(embeds.device, embeds.dtype)
    scale = torch.where(lengths > 0, alpha / torch.sqrt(lengths.clamp(min=1) * embeds.shape[-1]), 0.0)
    noise = torch.empty_like(embeds).uniform_(-1.0, 1.0) * scale[..., None]
    out = {k: v for k, v in inputs.items() if k != "input_ids"}
    out["inputs_embeds"] = embeds + noise
    return out

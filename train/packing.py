"""Padding-free batches: several conversations packed into one row, each with its own positions
(restarting at 0), and an attention path that never attends across them and never builds an
S x S mask.

    groups = token_batches(lengths, max_tokens=8192)      # micro-batches of example indices
    use_packed_attention(model)                            # once, after loading
    batch = pack([examples[i] for i in groups[0]], pad_id)
    logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits

`token_batches` is length-bucketed first-fit-decreasing: the longest examples are placed first,
each into the first micro-batch with room, so rows fill up to `max_tokens` (an example longer
than `max_tokens` gets a micro-batch of its own). `pack` concatenates the examples of one
micro-batch into a single row; the first token of every conversation is unlabelled, so no
conversation predicts the next one's first token.

The attention function "forgeplay_packed" (registered with transformers' `AttentionInterface`
and `AttentionMaskInterface`) reads the conversation boundaries from `position_ids` (a row's
position falls back to 0 where a conversation starts, as transformers' own
`DataCollatorWithFlattening` packs) and calls PyTorch's causal `scaled_dot_product_attention`
once per conversation: on CPU that is a flash-style kernel whose memory grows linearly with the
length, and no mask tensor exists. With a padding mask or a KV cache (rollouts, generation,
scoring) it is transformers' plain "sdpa" path, so the same model object still samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ATTENTION = "forgeplay_packed"
IGNORE = -100
SCALED_LOGITS = ("final_logit_softcapping", "logit_scale", "logits_scaling")  # the head is not the whole story


def token_batches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Indices of `lengths` grouped into micro-batches of at most `max_tokens` tokens (module docstring)."""
    if max_tokens < 1:
        raise ValueError(f"--max-batch-tokens must be >= 1, not {max_tokens}")
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        at = next((b for b, r in enumerate(room) if lengths[i] <= r), None)
        if at is None:
            bins.append([i])
            room.append(max_tokens - lengths[i])
        else:
            bins[at].append(i)
            room[at] -= lengths[i]
    return bins


def pack(examples: list[dict], pad_id: int | None = None) -> dict[str, torch.Tensor]:
    """One row [1, N] of the examples' `input_ids`, `labels` (a conversation's first token
    unlabelled) and `position_ids` (0.. per conversation). `pad_id` is unused (no padding)."""
    ids, labels, pos = [], [], []
    for e in examples:
        n = len(e["input_ids"])
        ids += e["input_ids"]
        labels += [IGNORE] + list(e["labels"][1:n])
        pos += range(n)
    row = lambda xs: torch.tensor([xs], dtype=torch.long)  # noqa: E731
    return {"input_ids": row(ids), "labels": row(labels), "position_ids": row(pos)}


def segments(position_ids: torch.Tensor) -> list[tuple[int, int]] | None:
    """(start, end) of each conversation of one row of `position_ids` ([S]); None for a single
    conversation (positions increasing by one)."""
    starts = (torch.diff(position_ids) != 1).nonzero()[:, 0] + 1
    if starts.numel() == 0:
        return None
    bounds = [0, *starts.tolist(), position_ids.numel()]
    return list(zip(bounds[:-1], bounds[1:]))


def packed_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                     **kwargs):
    """transformers attention function: one causal SDPA call per packed conversation (module
    docstring); transformers' sdpa path with a mask, a cache or a single conversation a row."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    pos = kwargs.get("position_ids")
    rows = None
    if attention_mask is None and pos is not None and query.shape[2] == key.shape[2] > 1:
        pos = pos.expand(query.shape[0], -1)
        rows = [segments(p) for p in pos]
    if rows is None or all(r is None for r in rows):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    gqa = query.shape[1] != key.shape[1]
    out = torch.cat([torch.cat([torch.nn.functional.scaled_dot_product_attention(
        query[b:b + 1, :, s:e], key[b:b + 1, :, s:e], value[b:b + 1, :, s:e], dropout_p=dropout, scale=scaling,
        is_causal=True, enable_gqa=gqa) for s, e in parts or [(0, query.shape[2])]], dim=2)
        for b, parts in enumerate(rows)])
    return out.transpose(1, 2).contiguous(), None


def packed_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, attention_mask=None, **kwargs):
    """transformers mask function: no mask when the attention function can do without one
    (no padding, no cache: causal within each packed conversation), else sdpa's mask."""
    from transformers.masking_utils import sdpa_mask

    no_padding = attention_mask is None or bool(attention_mask.all())
    if no_padding and q_length == kv_length and not q_offset and not kv_offset:
        return None
    return sdpa_mask(batch_size, q_length, kv_length, q_offset=q_offset, kv_offset=kv_offset,
                     attention_mask=attention_mask, **kwargs)


def register() -> None:
    """Make "forgeplay_packed" known to transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION, packed_attention)
    AttentionMaskInterface.register(ATTENTION, packed_mask)


def use_packed_attention(model) -> None:
    """Switch a loaded transformers model to the packed attention path. Models whose attention
    is more than causal softmax attention (sliding windows, soft-capping) are refused."""
    cfg = model.config
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        raise ValueError(f"{type(model).__name__} uses sliding-window attention, which packed batches do not support")
    if getattr(cfg, "attn_logit_softcapping", None):
        raise ValueError(f"{type(model).__name__} soft-caps attention logits, which packed batches do not support")
    register()
    model.set_attn_implementation(ATTENTION)
    _probe(model)


@torch.no_grad()
def _probe(model) -> None:
    """Two short sequences packed in one row must give the logits they give apart: a model whose
    attention does not take the packed path (no position_ids reach it) would attend across."""
    dev = next(model.parameters()).device
    if dev.type == "meta":  # a rank that loaded no weights (train/shard.py): rank 0 probes the same model
        return
    vocab = model.get_input_embeddings().num_embeddings
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randint(0, vocab, (1, n), generator=g).to(dev) for n in (5, 7))
    pos = torch.cat([torch.arange(5), torch.arange(7)])[None].to(dev)
    was = model.training
    model.eval()
    try:
        packed = model(input_ids=torch.cat([a, b], dim=1), position_ids=pos).logits[0, 5:]
        alone = model(input_ids=b).logits[0]
    finally:
        model.train(was)
    if not torch.allclose(packed.float(), alone.float(), atol=1e-3, rtol=1e-3):
        raise ValueError(f"{type(model).__name__} does not take packed attention (its blocks do not pass "
                         "position_ids to attention): train it with --max-batch-tokens 0 (padded batches)")


def is_packed(model) -> bool:
    """Whether `model` runs the packed attention path (`use_packed_attention`)."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) == ATTENTION


@dataclass
class Inputs:
    """Model inputs for a list of token sequences: one packed row when the model runs packed
    attention, else right-padded rows with an attention mask; `at` maps (row, column) of a
    sequence to (row, column) of the model's input."""

    kwargs: dict
    offsets: torch.Tensor | None  # start of each sequence in the packed row; None when padded

    def at(self, rows: torch.Tensor, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.offsets is None:
            return rows, cols
        return torch.zeros_like(rows), self.offsets.to(rows.device)[rows] + cols


def model_inputs(model, seqs: list[list[int]], pad_id: int) -> Inputs:
    """`Inputs` of `seqs` for `model`, on its device (class docstring)."""
    dev = next(model.parameters()).device
    if is_packed(model):
        b = pack([{"input_ids": list(s), "labels": list(s)} for s in seqs])
        lens = torch.tensor([0] + [len(s) for s in seqs])
        return Inputs({"input_ids": b["input_ids"].to(dev), "position_ids": b["position_ids"].to(dev)},
                      lens.cumsum(0)[:-1])
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, :len(s)] = torch.tensor(s, dtype=torch.long)
        att[r, :len(s)] = 1
    return Inputs({"input_ids": ids.to(dev), "attention_mask": att.to(dev)}, None)


def token_logprobs_at(model, inputs: dict, rows: torch.Tensor, cols: torch.Tensor,
                      targets: torch.Tensor) -> torch.Tensor:
    """[M] log-probability of `targets` predicted at input positions (rows, cols) of one forward
    pass of `model` on `inputs`: the vocabulary projection is applied to those M positions only,
    in chunks (train.losses.chunked_token_logprobs). Models whose logits are more than the output
    layer (soft-capping, scaling) project every position."""
    from train.losses import chunked_token_logprobs

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    targets = targets.to(rows.device)
    if head is None or any(getattr(model.config, k, None) for k in SCALED_LOGITS):
        logits = model(**inputs, use_cache=False).logits[rows, cols].float()
        return logits.gather(-1, targets[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)
    from train.shard import in_forward

    def run() -> torch.Tensor:  # the decoder, then the output layer: one call of a sharded model's root
        hidden = model.base_model(**inputs, use_cache=False).last_hidden_state
        return chunked_token_logprobs(hidden[rows, cols], head, targets)

    return in_forward(model, run)

"""Shared-prefix grouping for GRPO log-probabilities (as in Prefix Grouper, arXiv 2506.05433).

The G rollouts of a group start with the same prompt tokens (system + user + the assistant
header). Instead of running that prompt G times, `grouped_token_logprobs` runs it once
(batch 1, with a KV cache), expands the cache to G rows and runs the G continuations as one
right-padded batch on top of it, with position ids that continue after the prefix. The
autograd graph is kept, so the gradient of every continuation reaches the prefix's keys and
values and flows through the prefix computation once (summed over the G rows). Up to float
rounding, log-probabilities, loss and gradients equal the plain path's
(`plain_token_logprobs`); tests/train/test_prefix.py checks this.

    from train.prefix import grouped_token_logprobs
    logp = grouped_token_logprobs(model, seqs, pad_id, group_size=8, start=prompt_len)

A group whose rows share no prefix (or a single-row group) takes the plain path. `start` is
the first position whose log-probability is needed (earlier columns are 0): positions
before it get no vocabulary projection, which is most of the cost of a long prompt.
"""

from __future__ import annotations

import torch


def shared_prefix_len(seqs: list[list[int]]) -> int:
    """Length of the longest common prefix of `seqs`, leaving each row at least one token."""
    limit = min(len(s) for s in seqs) - 1
    n = 0
    while n < limit and all(s[n] == seqs[0][n] for s in seqs[1:]):
        n += 1
    return n


def pad_ids(seqs: list[list[int]], pad_id: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded [B, width] token ids and attention mask (1 on real tokens)."""
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, :len(s)] = torch.tensor(s, dtype=torch.long)
        att[r, :len(s)] = 1
    return ids, att


def _gather_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log_softmax(logits)[target] per position, in float32."""
    logits = logits.float()
    return logits.gather(-1, targets[..., None])[..., 0] - torch.logsumexp(logits, dim=-1)


def _zero_padding(lp: torch.Tensor, seqs: list[list[int]], start: int) -> torch.Tensor:
    """Set columns before `start` and past each row's end to 0."""
    cols = torch.arange(lp.shape[1], device=lp.device)
    lens = torch.tensor([len(s) for s in seqs], device=lp.device)
    valid = (cols[None, :] >= start) & (cols[None, :] < lens[:, None])
    return lp.masked_fill(~valid, 0.0)


def plain_token_logprobs(model, seqs: list[list[int]], pad_id: int, start: int = 1) -> torch.Tensor:
    """[B, T] log-probability of token t given tokens < t for t >= `start`, right-padded; 0 before
    `start` and on padding. One forward pass (the rows packed into one when the model runs packed
    attention, train/packing.py); only the positions from `start - 1` on are projected to the
    vocabulary, in chunks."""
    from train.packing import model_inputs, token_logprobs_at

    if start < 1:
        raise ValueError("start must be >= 1 (token 0 has no log-probability)")
    dev = next(model.parameters()).device
    width = max(len(s) for s in seqs)
    ids, att = pad_ids(seqs, pad_id, width)
    out = torch.zeros(ids.shape, dtype=torch.float32, device=dev)
    cols = torch.arange(width)
    rows, cols = ((cols[None, :] >= start) & att.bool()).nonzero(as_tuple=True)  # the predicted tokens
    if rows.numel() == 0:
        return out
    inputs = model_inputs(model, seqs, pad_id)
    r, c = inputs.at(rows.to(dev), cols.to(dev) - 1)
    lp = token_logprobs_at(model, inputs.kwargs, r, c, ids[rows, cols].to(dev))
    return out.index_put((rows.to(dev), cols.to(dev)), lp)


def _group_logprobs(model, seqs: list[list[int]], pad_id: int, start: int) -> torch.Tensor:
    """One group's [G, max len] log-probabilities: one prefix pass, one continuation batch."""
    g, p = len(seqs), shared_prefix_len(seqs)
    if g == 1 or p < 1:
        return plain_token_logprobs(model, seqs, pad_id, start=start)
    dev = next(model.parameters()).device
    prefix = torch.tensor([seqs[0][:p]], dtype=torch.long, device=dev)
    keep = max(1, p - start + 1)  # the last prefix logit predicts each row's first continuation token
    out = model(input_ids=prefix, use_cache=True, logits_to_keep=keep)
    cache, head = out.past_key_values, out.logits[0]
    cols = [torch.zeros((g, p - keep + 1), dtype=torch.float32, device=dev)]
    if keep > 1:  # prefix tokens p - keep + 1 .. p - 1, the same for every row
        cols.append(_gather_logprobs(head[:-1], prefix[0, p - keep + 1:]).expand(g, -1))
    first = torch.tensor([s[p] for s in seqs], device=dev)
    cols.append(_gather_logprobs(head[-1:].expand(g, -1), first)[:, None])
    rest = [s[p:] for s in seqs]
    c = max(len(r) for r in rest)
    if c > 1:  # continuations on top of the prefix cache, right-padded, positions p .. p + c - 1
        cache.batch_repeat_interleave(g)
        ids, att = pad_ids(rest, pad_id, c)
        ids, att = ids.to(dev), att.to(dev)
        mask = torch.cat([torch.ones((g, p), dtype=att.dtype, device=dev), att], dim=1)
        pos = torch.arange(p, p + c, device=dev).expand(g, -1)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                       use_cache=True).logits[:, :-1]
        cols.append(_gather_logprobs(logits, ids[:, 1:]))
    return _zero_padding(torch.cat(cols, dim=1), seqs, start)


def grouped_token_logprobs(model, seqs: list[list[int]], pad_id: int, group_size: int,
                           start: int = 1) -> torch.Tensor:
    """[N, T] log-probabilities as `plain_token_logprobs`, where rows come in consecutive groups of
    `group_size` that share a prompt; each group's common prefix is encoded once."""
    if group_size < 1 or len(seqs) % group_size:
        raise ValueError(f"{len(seqs)} sequences do not split into groups of {group_size}")
    if start < 1:
        raise ValueError("start must be >= 1 (token 0 has no log-probability)")
    width = max(len(s) for s in seqs)
    parts = [_group_logprobs(model, seqs[i:i + group_size], pad_id, start) for i in range(0, len(seqs), group_size)]
    return torch.cat([torch.nn.functional.pad(x, (0, width - x.shape[1])) for x in parts], dim=0)

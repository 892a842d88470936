"""The transformers backend's cross-turn KV cache: a multi-turn conversation continues from
the keys and values its last turn left, instead of re-encoding the whole conversation.

When a sample finishes, the keys and values of everything the model read for it (its prompt
and all but its last sampled token) are kept under those token ids. A later prompt reuses
the entry with the longest common prefix: in a tool rollout that is the previous turn's
prompt and reply, so only the tool result and the new turn's header are encoded. Matching
is by token ids, so a reply that renders back into different tokens only shortens what is
reused. Entries are dropped oldest first above `max_bytes`, and all of them when the model's
weights change (an optimizer step): keys and values of old weights are never reused.

    cache = TurnCache(max_bytes=2 << 30)
    reuse, kv = cache.lookup(prompt_ids)        # kv: per layer (keys, values) of reuse positions
    past, mask, ids, pos = continue_batch(...)   # a left-padded batch continuing from them
    cache.put(token_ids, per_layer_kv)
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch


def weights_version(model: torch.nn.Module) -> int:
    """Sum of the parameters' in-place modification counters: it grows whenever an optimizer
    step or `load_state_dict` writes any parameter, and stays put otherwise."""
    return sum(p._version for p in model.parameters())


def _nbytes(kv: list[tuple[torch.Tensor, torch.Tensor]]) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


class TurnCache:
    """Keys and values of finished samples, looked up by longest common token prefix."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[tuple[int, ...], tuple[np.ndarray, list[tuple[torch.Tensor, torch.Tensor]]]] = \
            OrderedDict()
        self.bytes = 0
        self.weights: tuple | None = None
        self.reused = self.encoded = 0  # prompt tokens taken from the cache / encoded (for reports)

    def check_weights(self, model: torch.nn.Module) -> None:
        """Drop every entry when `model`'s weights changed since the last call."""
        version = (id(model), weights_version(model))
        if version != self.weights:
            self.clear()
            self.weights = version

    def clear(self) -> None:
        self.entries.clear()
        self.bytes = 0

    def lookup(self, prompt: list[int]) -> tuple[int, list[tuple[torch.Tensor, torch.Tensor]] | None]:
        """(positions reusable, their per-layer (keys, values)); at least the last prompt token is
        left to encode (its logits start the reply)."""
        ids = np.asarray(prompt)
        best, hit = 0, None
        for key, (arr, kv) in self.entries.items():
            n = min(common_prefix(arr, ids), len(prompt) - 1)
            if n > best:
                best, hit = n, key
        if hit is None:
            return 0, None
        self.entries.move_to_end(hit)
        kv = self.entries[hit][1]
        return best, [(k[:, :best], v[:, :best]) for k, v in kv]

    def put(self, tokens: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Keep `kv` (per layer, keys and values of shape heads x len(tokens) x dim) for `tokens`."""
        key = tuple(tokens)
        if key in self.entries or not tokens:
            return
        size = _nbytes(kv)
        if size > self.max_bytes:
            return
        self.entries[key] = (np.asarray(tokens), kv)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, old) = self.entries.popitem(last=False)
            self.bytes -= _nbytes(old)


def continue_batch(prompts: list[list[int]], reused: list[tuple[int, list | None]], pad_id: int, device):
    """Inputs of a prefill that continues each prompt from its reused positions: (past
    key/value pairs per layer, left-padded to the longest reuse; the attention mask over past
    and new positions; the new token ids, left-padded; their position ids)."""
    R = max(r for r, _ in reused)
    suffixes = [p[r:] for p, (r, _) in zip(prompts, reused)]
    S = max(len(s) for s in suffixes)
    B = len(prompts)
    layers = next(kv for _, kv in reused if kv is not None)
    past = []
    for layer, (k0, v0) in enumerate(layers):
        k = k0.new_zeros((B, k0.shape[0], R, k0.shape[2]))
        v = v0.new_zeros((B, v0.shape[0], R, v0.shape[2]))
        for b, (r, kv) in enumerate(reused):
            if r:
                k[b, :, R - r:] = kv[layer][0]
                v[b, :, R - r:] = kv[layer][1]
        past.append((k, v))
    mask = torch.zeros((B, R + S), dtype=torch.long)
    ids = torch.full((B, S), pad_id, dtype=torch.long)
    pos = torch.zeros((B, S), dtype=torch.long)
    for b, ((r, _), s) in enumerate(zip(reused, suffixes)):
        mask[b, R - r:R] = 1
        mask[b, R + S - len(s):] = 1
        ids[b, S - len(s):] = torch.tensor(s, dtype=torch.long)
        pos[b, S - len(s):] = torch.arange(r, r + len(s))
    return past, mask.to(device), ids.to(device), pos.to(device)


def row_kv(cache, b: int, mask_row: torch.Tensor, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, the keys and values of the first `n` real positions of batch row `b` of a
    DynamicCache (padding skipped), as copies."""
    idx = mask_row.nonzero().flatten()[:n]
    return [(layer.keys[b][:, idx].clone(), layer.values[b][:, idx].clone()) for layer in cache.layers]

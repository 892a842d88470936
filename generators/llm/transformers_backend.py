"""The `transformers` backend: in-process batched sampling with a Hugging Face causal LM.

The embedded default (SmolLM2-135M-Instruct on CPU, float32) or any local model folder:

    from generators.llm.base import ChatRequest
    from generators.llm.transformers_backend import TransformersBackend
    be = TransformersBackend()            # embedded model, prepared on demand
    be.generate([ChatRequest(messages=[{"role": "user", "content": "Hi"}], n=4, seed=1)])

How it samples:
- Prompts are rendered with the tokenizer's chat template (add_generation_prompt=True).
  Each request is expanded into `n` samples; samples are sorted by prompt length
  (bucketing) and cut into batches of `batch_size`. A unique prompt is prefilled once and
  its KV cache copied to its `n` samples; prompts are left-padded with attention masks.
- Decoding is a KV-cached loop; rows that finish are dropped from the batch.
- Per row: temperature (0 = greedy), top-p, `max_tokens` ("length"), stop strings (text
  cut before the stop string, "stop"), end-of-sequence tokens ("stop").
- Seeds: sample j of a request with seed s draws its randomness from its own generator
  seeded from (s, j), so the same call with the same seeds gives exactly the same
  completions. Which other requests share the batch changes only float rounding (padding,
  batch shape): greedy tokens stay the same, but a sampled token, drawn by inverting the
  CDF of the vocabulary, can move to a neighbour when the draw falls within rounding of
  a boundary (rare with a trained model's peaked distributions, frequent with a random
  one's flat ones). seed=None draws a fresh seed.
- `Completion.token_ids` are the sampled tokens, including the end-of-sequence token or
  the token that completed a stop string. `Completion.logprobs` (when asked) are, for each
  of those tokens, log_softmax of the raw logits, i.e. under the model at temperature 1
  without top-p, as vLLM reports by default; `score()` recomputes them teacher-forced.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from generators.llm.base import ChatRequest, Completion, Declared, Usage
from generators.llm.cores import CoreShare
from generators.llm.model_store import resolve_model
from generators.llm.turn_cache import TurnCache, continue_batch, row_kv

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def sample_seed(seed: int, index: int) -> int:
    """The generator seed of sample `index` of a request with `seed` (deterministic)."""
    return int(np.random.SeedSequence([seed & (2**63 - 1), index]).generate_state(1, np.uint64)[0] >> 1)


@dataclass
class _Sample:
    req: int
    idx: int
    prompt: list[int]
    request: ChatRequest
    seed: int


@dataclass
class _Row:
    """Decoding state of one sample."""

    sample: _Sample
    gen: torch.Generator
    tokens: list[int]
    logprobs: list[float]
    finish: str | None = None
    cut: int | None = None  # character offset of the stop string in the decoded text


class TransformersBackend(Declared):
    """Batched generation with a local transformers model (see module docstring).

    model: folder, prepared name or None (embedded); batch_size: samples decoded together;
    dtype: float32 on CPU; device: a torch device, or auto (cuda when there is one, else cpu);
    max_prompt_tokens: keep only the last N prompt tokens;
    ignore_eos: always generate max_tokens tokens (for benchmarks); threads: torch CPU
    threads for the whole process (default: torch's choice; 1 helps on a busy shared
    machine, where 2 threads stall on each other); turn_cache_mb: keep finished samples'
    KV (up to this many MB) so a conversation's next turn encodes only what is new
    (generators/llm/turn_cache.py; 0 = off). `generate` may be
    called from several threads; calls run one at a time.
    """

    name = "transformers"

    def __init__(self, model: str | Path | None = None, batch_size: int = 16, dtype: str = "float32",
                 device: str = "auto", max_prompt_tokens: int | None = None, ignore_eos: bool = False,
                 threads: int | None = None, turn_cache_mb: int = 0, lm: torch.nn.Module | None = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.cores = CoreShare.claim(threads)  # torch threads, shared with other model processes
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, not {dtype!r}")
        self.path = resolve_model(model)
        self.model = str(self.path)
        self.batch_size = batch_size
        self.device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
        self.max_prompt_tokens = max_prompt_tokens
        self.usage = Usage()
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        if lm is None:
            lm = AutoModelForCausalLM.from_pretrained(self.path, dtype=_DTYPES[dtype]).to(self.device).eval()
        self.lm = lm  # given: a module trained elsewhere (GRPO's policy), sampled as it is
        eos = self.lm.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        if self.tokenizer.eos_token_id is not None:
            eos.append(self.tokenizer.eos_token_id)
        self.eos_ids = set(eos)
        self.ignore_eos = ignore_eos  # benchmarks: always generate max_tokens tokens
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (min(self.eos_ids) if self.eos_ids else 0)
        self.context_len = getattr(self.lm.config, "max_position_embeddings", None)
        self._lock = threading.Lock()
        # multi-turn conversations continue from their last turn's KV (0: off; turn_cache.py)
        self.turn_cache = TurnCache(turn_cache_mb << 20) if turn_cache_mb > 0 else None

    # ---- prompts -------------------------------------------------------------------

    def encode_chat(self, messages: list[dict]) -> list[int]:
        """Token ids of `messages` rendered with the chat template, ready for the reply."""
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if self.max_prompt_tokens and len(ids) > self.max_prompt_tokens:
            ids = ids[-self.max_prompt_tokens:]  # keep the end, where the question is
        return ids

    def _left_pad(self, seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for r, s in enumerate(seqs):
            if s:
                ids[r, width - len(s):] = torch.tensor(s, dtype=torch.long)
                mask[r, width - len(s):] = 1
        return ids.to(self.device), mask.to(self.device)

    # ---- generation ----------------------------------------------------------------

    def generate(self, requests: Sequence[ChatRequest], progress: bool = False) -> list[list[Completion]]:
        """One list of `request.n` completions per request, in request order."""
        with self._lock:
            self.cores.refresh()
            if self.turn_cache is not None:
                self.turn_cache.check_weights(self.lm)
            return self._generate(requests, progress)

    def _generate(self, requests: Sequence[ChatRequest], progress: bool) -> list[list[Completion]]:
        started = time.perf_counter()
        samples: list[_Sample] = []
        prompt_tokens = 0
        for i, req in enumerate(requests):
            if req.n < 1 or req.max_tokens < 1:
                raise ValueError(f"request {i}: n and max_tokens must be >= 1")
            prompt = self.encode_chat(req.messages)
            prompt_tokens += len(prompt)
            seed = req.seed if req.seed is not None else secrets.randbits(63)
            samples += [_Sample(i, j, prompt, req, sample_seed(seed, j)) for j in range(req.n)]
        order = sorted(samples, key=lambda s: (len(s.prompt), s.req, s.idx))
        results: dict[tuple[int, int], Completion] = {}
        bar = None
        if progress:
            from tqdm.auto import tqdm
            bar = tqdm(total=len(samples), desc=f"generate ({self.name})", unit="sample")
        done_tokens = 0
        for b in range(0, len(order), self.batch_size):
            for comp, s in zip(self._run_batch(order[b:b + self.batch_size]), order[b:b + self.batch_size]):
                results[(s.req, s.idx)] = comp
                done_tokens += comp.completion_tokens
            if bar is not None:
                bar.update(min(self.batch_size, len(order) - b))
                bar.set_postfix(tok_s=f"{done_tokens / (time.perf_counter() - started):.1f}")
        if bar is not None:
            bar.close()
        out = [[results[(i, j)] for j in range(req.n)] for i, req in enumerate(requests)]
        self.usage.add(Usage(requests=len(requests), prompt_tokens=prompt_tokens,
                             completion_tokens=sum(c.completion_tokens for cs in out for c in cs),
                             seconds=time.perf_counter() - started))
        return out

    @torch.inference_mode()
    def _run_batch(self, batch: list[_Sample]) -> list[Completion]:
        # prefill each distinct prompt once, then copy its cache to its samples
        uniq: dict[tuple[int, ...], int] = {}
        for s in batch:
            uniq.setdefault(tuple(s.prompt), len(uniq))
        expand = torch.tensor([uniq[tuple(s.prompt)] for s in batch], device=self.device)
        cache, logits, mask, pos = self._prefill([list(u) for u in uniq])
        if len(uniq) != len(batch):
            cache.batch_select_indices(expand)
            logits, mask, pos = logits[expand], mask[expand], pos[expand]
        next_pos = pos[:, -1:] + 1

        rows = [_Row(s, torch.Generator().manual_seed(s.seed), [], []) for s in batch]
        active = list(range(len(rows)))  # row indices still in the batch, in batch order
        temps = torch.tensor([s.request.temperature for s in batch], dtype=torch.float32, device=self.device)
        top_ps = torch.tensor([s.request.top_p for s in batch], dtype=torch.float32, device=self.device)
        max_steps = max(s.request.max_tokens for s in batch)
        for step in range(max_steps):
            if step % 32 == 31:  # long batches follow the other model processes too
                self.cores.refresh()
            idx = torch.tensor(active, device=self.device)
            tokens, logps = self._sample(logits.float(), [rows[i] for i in active], temps[idx], top_ps[idx])
            still: list[int] = []
            for k, i in enumerate(active):
                row = rows[i]
                if row.finish is not None:  # finished, not yet dropped from the batch
                    continue
                row.tokens.append(tokens[k])
                row.logprobs.append(logps[k])
                self._check_finish(row)
                if row.finish is None:
                    still.append(k)
            if not still:
                break
            step_ids = torch.tensor(tokens, device=self.device)[:, None]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            # drop finished rows once they are a quarter of the batch
            if len(still) < len(active) and (len(active) - len(still)) * 4 >= len(active):
                self._keep_turns(cache, mask, rows, [(k, i) for k, i in enumerate(active) if k not in still])
                keep = torch.tensor(still, device=self.device)
                cache.batch_select_indices(keep)
                step_ids, mask, next_pos = step_ids[keep], mask[keep], next_pos[keep]
                active = [active[k] for k in still]
            out = self.lm(input_ids=step_ids, attention_mask=mask, position_ids=next_pos,
                          past_key_values=cache, use_cache=True)
            cache, logits = out.past_key_values, out.logits[:, -1, :]
            next_pos = next_pos + 1
        self._keep_turns(cache, mask, rows, list(enumerate(active)))
        return [self._completion(r) for r in rows]

    def _prefill(self, prompts: list[list[int]]):
        """(KV cache, last logits, attention mask, position ids) of the prompts, continuing from
        the cross-turn cache's entries where it has them (generators/llm/turn_cache.py)."""
        reused = [self.turn_cache.lookup(p) for p in prompts] if self.turn_cache is not None else []
        if not any(r for r, _ in reused):
            ids, mask = self._left_pad(prompts)
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            out = self.lm(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
            if self.turn_cache is not None:
                self.turn_cache.encoded += sum(len(p) for p in prompts)
            return out.past_key_values, out.logits[:, -1, :], mask, pos
        from transformers import DynamicCache

        past, mask, ids, pos = continue_batch(prompts, reused, self.pad_id, self.device)
        self.turn_cache.reused += sum(r for r, _ in reused)
        self.turn_cache.encoded += sum(len(p) - r for p, (r, _) in zip(prompts, reused))
        out = self.lm(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1,
                      past_key_values=DynamicCache(ddp_cache_data=past, config=self.lm.config))
        return out.past_key_values, out.logits[:, -1, :], mask, pos

    def _keep_turns(self, cache, mask: torch.Tensor, rows: list[_Row], at: list[tuple[int, int]]) -> None:
        """Keep the KV of finished rows (`at`: (batch position, row index)) for their next turn."""
        if self.turn_cache is None:
            return
        for b, i in at:
            row = rows[i]
            seen = row.sample.prompt + row.tokens[:-1]  # the last sampled token was never read
            self.turn_cache.put(seen, row_kv(cache, b, mask[b], len(seen)))

    def _sample(self, logits: torch.Tensor, rows: list[_Row], temps: torch.Tensor,
                top_ps: torch.Tensor) -> tuple[list[int], list[float]]:
        """One token per row: greedy where temperature is 0, else nucleus sampling.

        The logprob of each chosen token is taken from the raw logits (temperature 1),
        computed only when some row asked for logprobs (else 0.0)."""
        chosen = logits.argmax(dim=-1)
        hot = (temps > 0).nonzero().flatten()
        if len(hot):
            probs = torch.softmax(logits[hot] / temps[hot, None], dim=-1)
            if bool((top_ps[hot] < 1).any()):
                sorted_p, idx = probs.sort(dim=-1, descending=True)
                drop = (sorted_p.cumsum(-1) - sorted_p) >= top_ps[hot, None]
                sorted_p = sorted_p.masked_fill(drop, 0.0)
                probs = torch.zeros_like(probs).scatter_(-1, idx, sorted_p)
            cdf = probs.cumsum(-1)
            u = torch.cat([torch.rand(1, generator=rows[int(h)].gen) for h in hot])[:, None].to(cdf.device)
            picked = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp(max=probs.shape[-1] - 1)
            chosen[hot] = picked[:, 0]
        if not any(r.sample.request.logprobs for r in rows):
            return chosen.tolist(), [0.0] * len(rows)
        lp = logits.gather(-1, chosen[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)
        return chosen.tolist(), lp.tolist()

    def _decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def _check_finish(self, row: _Row) -> None:
        req = row.sample.request
        if row.tokens[-1] in self.eos_ids and not self.ignore_eos:
            row.finish = "stop"
            return
        if req.stop:
            text = self._decode(row.tokens)
            hits = [text.find(s) for s in req.stop if s and s in text]
            if hits:
                row.finish, row.cut = "stop", min(hits)
                return
        if len(row.tokens) >= req.max_tokens:
            row.finish = "length"

    def _completion(self, row: _Row) -> Completion:
        req = row.sample.request
        text = self._decode(row.tokens)
        if row.cut is not None:
            text = text[:row.cut]
        return Completion(text=text, token_ids=list(row.tokens),
                          logprobs=list(row.logprobs) if req.logprobs else None,
                          finish_reason=row.finish or "length", prompt_tokens=len(row.sample.prompt),
                          completion_tokens=len(row.tokens))

    # ---- teacher forcing -----------------------------------------------------------

    @torch.inference_mode()
    def score(self, prompt_ids: Sequence[int] | Sequence[Sequence[int]],
              completion_ids: Sequence[int] | Sequence[Sequence[int]],
              batch_tokens: int = 8192) -> list[float] | list[list[float]]:
        """Teacher-forced log-probabilities (temperature 1) of `completion_ids` after `prompt_ids`.

        Takes one sequence pair (-> list[float]) or lists of them (-> list[list[float]]).
        `batch_tokens` bounds (rows x kept positions) per forward pass to limit memory.
        """
        single = len(prompt_ids) == 0 or isinstance(prompt_ids[0], int)
        prompts = [list(prompt_ids)] if single else [list(p) for p in prompt_ids]
        comps = [list(completion_ids)] if single else [list(c) for c in completion_ids]
        if len(prompts) != len(comps):
            raise ValueError("prompt_ids and completion_ids differ in length")
        result: list[list[float]] = [[] for _ in prompts]
        todo = sorted((i for i in range(len(prompts)) if comps[i]), key=lambda i: len(prompts[i]) + len(comps[i]))
        while todo:
            chunk = [todo.pop(0)]
            while todo and (len(chunk) + 1) * (max(len(comps[i]) for i in chunk + [todo[0]]) + 1) <= batch_tokens:
                chunk.append(todo.pop(0))
            if any(not prompts[i] for i in chunk):
                raise ValueError("score needs a non-empty prompt for each completion")
            ids, mask = self._left_pad([prompts[i] + comps[i] for i in chunk])
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            keep = max(len(comps[i]) for i in chunk) + 1
            logits = self.lm(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=keep).logits
            logp = torch.log_softmax(logits.float(), dim=-1)
            for r, i in enumerate(chunk):
                c = len(comps[i])
                lp = logp[r, keep - 1 - c:keep - 1]
                target = torch.tensor(comps[i], device=lp.device)[:, None]
                result[i] = lp.gather(-1, target)[:, 0].tolist()
        return result[0] if single else result

    @torch.inference_mode()
    def hidden_states(self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]] | None = None,
                      layer: int = -1, pool: str = "last") -> torch.Tensor:
        """One vector per sequence from hidden layer `layer`: `pool` = "last" token or "mean"
        over the completion tokens (over the whole sequence when no completions)."""
        if pool not in ("last", "mean"):
            raise ValueError("pool must be 'last' or 'mean'")
        comps = [list(c) for c in completion_ids] if completion_ids is not None else [[] for _ in prompt_ids]
        seqs = [list(p) + c for p, c in zip(prompt_ids, comps)]
        ids, mask = self._left_pad(seqs)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        h = self.lm(input_ids=ids, attention_mask=mask, position_ids=pos, output_hidden_states=True,
                    logits_to_keep=1).hidden_states[layer].float()
        if pool == "last":
            return h[:, -1, :].cpu()
        width = ids.shape[1]
        sel = torch.zeros_like(mask, dtype=torch.float32)
        for r, (s, c) in enumerate(zip(seqs, comps)):
            sel[r, width - (len(c) if c else len(s)):] = 1.0
        return ((h * sel[..., None]).sum(1) / sel.sum(1, keepdim=True).clamp(min=1)).cpu()

    def close(self) -> None:
        self.lm = None  # type: ignore[assignment]


def check_model(path, question: str = "What is the capital of France?", max_tokens: int = 24) -> str:
    """Greedy answer of the model in `path` to `question` (a quick sanity check)."""
    backend = TransformersBackend(path, batch_size=1)
    try:
        req = ChatRequest(messages=[{"role": "user", "content": question}], temperature=0.0, max_tokens=max_tokens)
        return backend.generate([req])[0][0].text
    finally:
        backend.close()

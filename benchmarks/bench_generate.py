"""Throughput of the `transformers` backend against plain `model.generate` on the same prompts.

Three ways to produce `--max-tokens` greedy tokens for each of `--prompts` chat prompts
with the embedded model (or `--model DIR`), all forced to the same length (end-of-sequence
ignored) so token counts match:

1. forgeplay's TransformersBackend (bucketing, shared prefill, KV-cached loop),
2. a plain sequential loop of `model.generate`, one prompt at a time,
3. raw batched `model.generate` calls, `--batch-size` prompts each (left padding).

The prompts are cut into chunks of `--batch-size`; the three methods run one after the
other on each chunk (interleaved), so a busy machine slows all three alike.

    python benchmarks/bench_generate.py --prompts 64 --max-tokens 64 --batch-size 16

Prints a table with tokens/s and the ratios backend/sequential and backend/batched.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from comparisons import record  # noqa: E402
from generators.llm.base import ChatRequest  # noqa: E402
from generators.llm.model_store import resolve_model  # noqa: E402
from generators.llm.transformers_backend import TransformersBackend  # noqa: E402

TOPICS = ["the sea", "a mountain", "bread", "a library", "the moon", "rain", "a train", "chess",
          "a garden", "winter", "coffee", "a bridge", "music", "the desert", "a river", "a city"]
ASKS = ["Write two sentences about {}.", "What do people like about {}?",
        "Give three facts about {}, briefly.", "Describe {} to a child in a short paragraph."]


def make_prompts(n: int) -> list[list[dict]]:
    """`n` different chat prompts of varied length (deterministic)."""
    out = []
    for i in range(n):
        ask = ASKS[i % len(ASKS)].format(TOPICS[(i // len(ASKS)) % len(TOPICS)])
        if i % 3 == 0:
            ask = "Please answer carefully and in plain words. " + ask
        out.append([{"role": "user", "content": ask + (f" (variant {i})" if i >= len(ASKS) * len(TOPICS) else "")}])
    return out


def _timed(fn, *args) -> tuple[int, float]:
    start = time.perf_counter()
    tokens = fn(*args)
    return tokens, time.perf_counter() - start


def backend_chunk(be, prompts, max_tokens) -> int:
    reqs = [ChatRequest(messages=m, temperature=0.0, max_tokens=max_tokens) for m in prompts]
    return sum(c.completion_tokens for cs in be.generate(reqs) for c in cs)


def _hf_generate(model, ids, mask, max_tokens, pad_id):
    return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_tokens,
                          min_new_tokens=max_tokens, do_sample=False, pad_token_id=pad_id)


def sequential_chunk(model, tok, prompts, max_tokens) -> int:
    tokens = 0
    with torch.inference_mode():
        for m in prompts:
            enc = tok.apply_chat_template(m, add_generation_prompt=True, return_tensors="pt", return_dict=True)
            out = _hf_generate(model, enc["input_ids"], enc["attention_mask"], max_tokens, tok.pad_token_id)
            tokens += out.shape[1] - enc["input_ids"].shape[1]
    return tokens


def batched_chunk(model, tok, prompts, max_tokens) -> int:
    """One raw batched `model.generate` call over `prompts` (left padding)."""
    tok.padding_side = "left"
    texts = [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in prompts]
    with torch.inference_mode():
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        out = _hf_generate(model, enc["input_ids"], enc["attention_mask"], max_tokens, tok.pad_token_id)
    return (out.shape[1] - enc["input_ids"].shape[1]) * out.shape[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=64, help="number of chat prompts")
    ap.add_argument("--max-tokens", type=int, default=64, help="new tokens per prompt (forced)")
    ap.add_argument("--batch-size", type=int, default=16, help="batch size of the backend and of the batched baseline")
    ap.add_argument("--sequential-prompts", type=int, default=None,
                    help="run the slow sequential baseline on only the first N prompts (default: all)")
    ap.add_argument("--model", default=None, help="model folder (default: the embedded model)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads for all three (default: torch's)")
    args = ap.parse_args()
    if args.sequential_prompts is not None and args.sequential_prompts < 1:
        ap.error("--sequential-prompts must be >= 1")

    from transformers import AutoModelForCausalLM, AutoTokenizer

    if args.threads:
        torch.set_num_threads(args.threads)

    model_dir = resolve_model(args.model)
    prompts = make_prompts(args.prompts)
    print(f"model {model_dir}\n{args.prompts} prompts x {args.max_tokens} tokens, batch size {args.batch_size}, "
          f"{torch.get_num_threads()} threads")
    be = TransformersBackend(model_dir, batch_size=args.batch_size, ignore_eos=True)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    chunks = [prompts[b:b + args.batch_size] for b in range(0, len(prompts), args.batch_size)]
    n_seq = len(prompts) if args.sequential_prompts is None else min(args.sequential_prompts, len(prompts))
    per_chunk = [n_seq // len(chunks) + (1 if i < n_seq % len(chunks) else 0) for i in range(len(chunks))]
    names = ["forgeplay transformers backend", f"raw batched model.generate (bs={args.batch_size})",
             f"sequential model.generate ({n_seq} prompts)"]
    rows = {k: [0, 0.0] for k in names}
    vs_batched, vs_sequential = [], []  # per-chunk ratios (robust to load changing between chunks)
    chunk_rates = []  # per chunk: tokens/s of (backend, batched, sequential)
    # interleave the three methods chunk by chunk, so load from other processes hits all alike
    for i, chunk in enumerate(chunks):
        timed = (_timed(backend_chunk, be, chunk, args.max_tokens),
                 _timed(batched_chunk, model, tok, chunk, args.max_tokens),
                 _timed(sequential_chunk, model, tok, chunk[:per_chunk[i]], args.max_tokens) if per_chunk[i] else (0, 0.0))
        for name, (t, s) in zip(names, timed):
            rows[name][0] += t
            rows[name][1] += s
        r = [t / s if s else 0.0 for t, s in timed]
        chunk_rates.append(r)
        vs_batched.append(r[0] / r[1])
        if r[2]:
            vs_sequential.append(r[0] / r[2])
        print(f"chunk {i + 1}/{len(chunks)}: tokens/s " + ", ".join(f"{t / s:.1f}" if s else "-" for t, s in timed)
              + " (backend, batched, sequential)", flush=True)
    rate = {k: t / s for k, (t, s) in rows.items()}
    table = Table(title="generation throughput (greedy, forced length)")
    for c in ("method", "tokens", "seconds", "tokens/s"):
        table.add_column(c, justify="right" if c != "method" else "left")
    for k, (t, s) in rows.items():
        table.add_row(k, str(t), f"{s:.1f}", f"{rate[k]:.1f}")
    console = Console()
    console.print(table)
    ours, batched, sequential = list(rate.values())
    console.print(f"backend / sequential = {ours / sequential:.2f}x overall, "
                  f"{statistics.median(vs_sequential):.2f}x median per chunk (target >= 4)")
    console.print(f"backend / raw batched = {ours / batched:.2f}x overall, "
                  f"{statistics.median(vs_batched):.2f}x median per chunk (target >= 0.9)")
    setting = f"{args.prompts} prompts x {args.max_tokens} tokens, chunks of {args.batch_size}"
    with_seq = [r for r in chunk_rates if r[2]]
    record("transformers backend", [r[0] for r in with_seq], "sequential model.generate", [r[2] for r in with_seq],
           "tokens/s", paired=True, setting=f"{setting}, {n_seq} sequential")
    record("transformers backend", [r[0] for r in chunk_rates], "raw batched model.generate",
           [r[1] for r in chunk_rates], "tokens/s", paired=True, setting=setting)


if __name__ == "__main__":
    main()

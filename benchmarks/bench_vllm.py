"""vLLM-CPU throughput on the embedded model, against the transformers backend as the peer.

Runs in the vllm virtualenv (`bash .ci/vllm_env.sh` creates .venv-vllm):

    .venv-vllm/bin/python benchmarks/bench_vllm.py --prompts 64 --max-tokens 64
    .venv-vllm/bin/python benchmarks/bench_vllm.py --no-eager --peer none   # with torch.compile

Each of `--prompts` different chat prompts gets exactly `--max-tokens` sampled tokens
(end-of-sequence ignored, so both backends produce the same number of tokens). The vLLM
engine is started and warmed up before the clock starts; the table reports its start
time separately. Prints tokens/s per backend and the ratio vLLM / transformers.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from comparisons import record  # noqa: E402
from generators.llm.base import ChatRequest  # noqa: E402

SUBJECTS = ["the sea", "a mountain", "bread", "a library", "the moon", "rain", "a train", "chess",
            "a garden", "winter", "coffee", "a bridge", "music", "the desert", "a river", "a city"]
FORMS = ["Write a short story about {}.", "List some facts about {}.",
         "Explain {} to a child.", "Write a poem about {}."]


def requests(n: int, max_tokens: int) -> list[ChatRequest]:
    """`n` different prompts, sampled at temperature 0.8 with a seed each."""
    out = []
    for i in range(n):
        text = FORMS[i % len(FORMS)].format(SUBJECTS[(i // len(FORMS)) % len(SUBJECTS)])
        out.append(ChatRequest(messages=[{"role": "user", "content": f"{text} (#{i})"}], n=1,
                               temperature=0.8, seed=i, max_tokens=max_tokens))
    return out


def run_vllm(args, reqs) -> dict:
    from generators.llm.vllm_backend import VLLMBackend

    kwargs = {"enforce_eager": args.eager, "dtype": args.dtype, "max_model_len": 2048}
    be = VLLMBackend(args.model, sampling_defaults={"ignore_eos": True}, **kwargs)
    t0 = time.perf_counter()
    be.generate(reqs[:2])  # starts the engine and warms it up
    start_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = be.generate(reqs, progress=args.progress)
    secs = time.perf_counter() - t0
    be.close()
    tokens = sum(c.completion_tokens for cs in out for c in cs)
    label = f"vllm ({args.dtype}, {'eager' if args.eager else 'compiled'})"
    return {"backend": label, "tokens": tokens, "seconds": secs, "start_seconds": start_s}


def run_transformers(args, reqs) -> dict:
    from generators.llm.transformers_backend import TransformersBackend

    try:
        be = TransformersBackend(args.model, batch_size=args.batch_size, ignore_eos=True)
    except TypeError:  # a backend without ignore_eos: token counts may then fall short
        be = TransformersBackend(args.model, batch_size=args.batch_size)
    be.generate(reqs[:1])  # warm-up
    t0 = time.perf_counter()
    out = be.generate(reqs, progress=args.progress)
    secs = time.perf_counter() - t0
    be.close()
    tokens = sum(c.completion_tokens for cs in out for c in cs)
    return {"backend": f"transformers (batch {args.batch_size})", "tokens": tokens, "seconds": secs,
            "start_seconds": None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=64, help="Number of different prompts (default 64).")
    ap.add_argument("--max-tokens", type=int, default=64, help="Tokens generated per prompt (default 64).")
    ap.add_argument("--model", default=None, help="Model folder (default: the embedded SmolLM2-135M-Instruct).")
    ap.add_argument("--dtype", default="float32", help="vLLM dtype (default float32; bfloat16 is slow "
                    "and inaccurate on CPUs without native bf16).")
    ap.add_argument("--eager", action=argparse.BooleanOptionalAction, default=True,
                    help="vLLM enforce_eager (default on; --no-eager compiles with torch.compile).")
    ap.add_argument("--peer", choices=["transformers", "none"], default="transformers",
                    help="Peer backend to compare against in the same run.")
    ap.add_argument("--batch-size", type=int, default=16, help="Batch size of the transformers peer.")
    ap.add_argument("--progress", action="store_true", help="Show progress bars.")
    ap.add_argument("--json", default=None, help="Also write the results to this JSON file.")
    args = ap.parse_args()

    reqs = requests(args.prompts, args.max_tokens)
    rows = [run_vllm(args, reqs)]
    if args.peer == "transformers":
        rows.append(run_transformers(args, reqs))
    for r in rows:
        r["tokens_per_s"] = r["tokens"] / r["seconds"] if r["seconds"] else 0.0
    base = rows[-1]["tokens_per_s"] if len(rows) > 1 else None

    table = Table(title=f"{args.prompts} prompts x {args.max_tokens} tokens, {os.cpu_count()} CPUs")
    for col in ("backend", "tokens", "seconds", "tokens/s", "vs transformers", "engine start s"):
        table.add_column(col, justify="left" if col == "backend" else "right")
    for r in rows:
        ratio = f"{r['tokens_per_s'] / base:.2f}x" if base else "-"
        start = "-" if r["start_seconds"] is None else f"{r['start_seconds']:.1f}"
        table.add_row(r["backend"], str(r["tokens"]), f"{r['seconds']:.1f}", f"{r['tokens_per_s']:.1f}", ratio, start)
    Console(width=120).print(table)
    if base:
        record(rows[0]["backend"], rows[0]["tokens_per_s"], rows[-1]["backend"], base, "tokens/s",
               setting=f"{args.prompts} prompts x {args.max_tokens} tokens")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()

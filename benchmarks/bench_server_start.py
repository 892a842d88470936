"""The vLLM server in eager mode (what forgeplay starts) against the same server with
torch.compile (vLLM's default): seconds to start, and seconds to decode the same greedy batch
twice (the first includes any warm-up left), with the ratios.

Runs in the main environment and starts the servers from .venv-vllm (`make vllm-env`):

    .venv/bin/python benchmarks/bench_server_start.py --prompts 16 --max-tokens 128
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from comparisons import record  # noqa: E402


def measure(model, eager: bool, prompts: int, max_tokens: int) -> dict:
    from generators.llm.base import ChatRequest
    from generators.llm.vllm_server import VLLMServer

    t0 = time.perf_counter()
    server = VLLMServer(model, eager=eager).start()  # a temporary folder, removed on close
    out = {"start": time.perf_counter() - t0}
    try:
        backend = server.backend()
        requests = [ChatRequest(messages=[{"role": "user", "content": f"Write a long story about the number {i}."}],
                                temperature=0.0, max_tokens=max_tokens) for i in range(prompts)]
        for run in ("first", "second"):
            t0 = time.perf_counter()
            done = backend.generate(requests)
            out[run] = time.perf_counter() - t0
            out[f"{run}_tokens"] = sum(c[0].completion_tokens for c in done)
    finally:
        server.close()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="model folder (default: the embedded model)")
    p.add_argument("--prompts", type=int, default=16, help="requests sent at once")
    p.add_argument("--max-tokens", type=int, default=128, help="tokens per request at most")
    args = p.parse_args(argv)
    from generators.llm.model_store import resolve_model

    model = resolve_model(args.model)
    runs = {name: measure(model, eager, args.prompts, args.max_tokens)
            for name, eager in (("eager (forgeplay)", True), ("torch.compile (vLLM's default)", False))}
    base = runs["torch.compile (vLLM's default)"]
    table = Table(title=f"vLLM server on {model.name}: start, then {args.prompts} greedy requests x "
                        f"{args.max_tokens} tokens, twice")
    for col in ("mode", "start s", "decode s (1st)", "decode s (2nd)", "tok/s (2nd)", "start vs compile",
                "decode vs compile"):
        table.add_column(col, justify="left" if col == "mode" else "right")
    for name, r in runs.items():
        table.add_row(name, f"{r['start']:.1f}", f"{r['first']:.1f}", f"{r['second']:.1f}",
                      f"{r['second_tokens'] / r['second']:.1f}", f"{base['start'] / r['start']:.2f}x faster",
                      f"{base['second'] / r['second']:.2f}x")
    Console().print(table)
    eager, setting = runs["eager (forgeplay)"], f"{args.prompts} greedy requests x {args.max_tokens} tokens"
    record("eager server start", eager["start"], "torch.compile server start", base["start"], "s", better="lower",
           setting=setting)
    record("eager decode (2nd batch)", eager["second"], "torch.compile decode (2nd batch)", base["second"], "s",
           better="lower", setting=setting)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Multi-turn tool rollouts: the lockstep transformers path that re-encodes every turn, the
same with the cross-turn KV cache, and the policy served by vLLM's server (every
conversation in flight at once, prefix caching), on the same world triples, prompts and
limits, greedy; and how long publishing the policy's weights takes.

Runs in the main environment and starts the server from .venv-vllm (`make vllm-env`):

    .venv/bin/python benchmarks/bench_rollout.py --model runs/sft1/final --n 48
    .venv/bin/python benchmarks/bench_rollout.py --model W/run/final    # W: experiments/sft_reasoning.py --work W

Use a model that calls tools (a briefly fine-tuned checkpoint, such as the one the SFT
experiment leaves in W/run/final): the base model answers at once and gives one-turn
rollouts. The world is built here (`--entities`, seed 5, as the SFT experiment's); the
questions are its first `--n` triples. The server is started and warmed up before its clock
starts; its start time is reported apart. Prints rollouts/s, policy tokens/s, turns per
rollout, each path's ratio to the plain lockstep one and how many of its conversations are
identical to that path's, then the median of `--publishes` weight publishes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from comparisons import record  # noqa: E402


def measure(backend, root, cfg) -> dict:
    from train.evaluate import evaluate

    t0 = time.perf_counter()
    summary, outs = evaluate(backend, root, cfg)
    secs = time.perf_counter() - t0
    tokens = sum(o.stats["policy_tokens"] for o in outs)
    return {"seconds": secs, "rollouts_s": len(outs) / secs, "tokens_s": tokens / secs,
            "turns": sum(o.stats["turns"] for o in outs) / len(outs), "em": summary["em"],
            "texts": [o.messages for o in outs]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="policy folder (default: the embedded model)")
    p.add_argument("--n", type=int, default=48, help="questions (one greedy rollout each)")
    p.add_argument("--entities", type=int, default=1000, help="entities of the world")
    p.add_argument("--max-turns", type=int, default=5, help="assistant turns per rollout at most")
    p.add_argument("--max-new-tokens", type=int, default=160, help="tokens per turn at most")
    p.add_argument("--batch-size", type=int, default=16, help="lockstep path: rollouts generated together")
    p.add_argument("--publishes", type=int, default=3, help="weight publishes to time")
    p.add_argument("--turn-cache-mb", type=int, default=2048, help="the turn cache's budget on its path")
    args = p.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    from generators.corpus.build import WorldConfig, write
    from generators.llm.model_store import resolve_model
    from generators.llm.transformers_backend import TransformersBackend
    from train.evaluate import EvalConfig, eval_backend

    model = resolve_model(args.model)
    root = Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    write(WorldConfig(seed=5, entities=args.entities), root, "w")
    cfg = EvalConfig(data="w", model=str(model), limit=args.n, held_out=False, tool_style="compact",
                     max_turns=args.max_turns, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)

    paths = {}
    for name, mb in (("transformers, lockstep", 0), ("transformers, lockstep + turn cache", args.turn_cache_mb)):
        lock = TransformersBackend(model, batch_size=args.batch_size, turn_cache_mb=mb)
        try:
            paths[name] = measure(lock, root, cfg)
        finally:
            lock.close()
    lockstep = paths["transformers, lockstep"]

    t0 = time.perf_counter()
    served_be = eval_backend(EvalConfig(**{**cfg.__dict__, "backend": "vllm-server"}))
    start = time.perf_counter() - t0
    try:
        measure(served_be, root, EvalConfig(**{**cfg.__dict__, "limit": 2}))  # warm-up
        served = measure(served_be, root, cfg)
        policy = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32)
        publish = [served_be.client.load_weights(policy.named_parameters()) for _ in range(args.publishes)]
    finally:
        served_be.close()

    paths["vLLM server, per conversation"] = served
    same = {k: sum(a == b for a, b in zip(lockstep["texts"], r["texts"])) for k, r in paths.items()}
    table = Table(title=f"{args.n} greedy tool rollouts, {args.max_turns} turns x {args.max_new_tokens} tokens at most "
                        f"({model.name})")
    for col in ("path", "seconds", "rollouts/s", "policy tok/s", "turns/rollout", "EM"):
        table.add_column(col, justify="right" if col != "path" else "left")
    table.add_column("vs lockstep", justify="right")
    table.add_column("same convs", justify="right")
    for name, r in paths.items():
        table.add_row(name, f"{r['seconds']:.1f}", f"{r['rollouts_s']:.3f}", f"{r['tokens_s']:.1f}",
                      f"{r['turns']:.2f}", f"{r['em']:.3f}", f"{r['rollouts_s'] / lockstep['rollouts_s']:.2f}x",
                      f"{same[name]}/{args.n}")
    console = Console()
    console.print(table)
    console.print(f"server start {start:.1f} s (not timed above); 'same convs': conversations identical to "
                  f"the lockstep path's")
    console.print(f"weight publish ({sum(p.numel() for p in policy.parameters()) / 1e6:.0f}M parameters): median "
                  f"{statistics.median(publish):.2f} s of {len(publish)} ({', '.join(f'{x:.2f}' for x in publish)})")
    for name, r in list(paths.items())[1:]:
        record(name, r["rollouts_s"], "transformers, lockstep", lockstep["rollouts_s"], "rollouts/s",
               setting=f"{args.n} greedy tool rollouts, {model.name}, {r['turns']:.1f} turns each")
    return 0


if __name__ == "__main__":
    sys.exit(main())

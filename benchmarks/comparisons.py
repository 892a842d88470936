"""One machine-readable form for every benchmark's comparisons (ours against a baseline).

A benchmark calls `record(...)` once per comparison it prints; each call appends one JSON line
to the file named by $FORGEPLAY_BENCH_RESULTS, and does nothing when that is unset (a
benchmark run by hand only prints its tables). benchmarks/results.py sets it, runs the
benchmarks and renders the lines as one table. Standard library only: the vLLM benchmark
records from .venv-vllm too.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

ENV = "FORGEPLAY_BENCH_RESULTS"


def _samples(values) -> list[float]:
    out = [float(v) for v in (values if isinstance(values, (list, tuple)) else [values])]
    if not out:
        raise ValueError("a comparison needs at least one sample on each side")
    return out


def comparison(ours: str, ours_values, baseline: str, baseline_values, unit: str, *, better: str = "higher",
               paired: bool = False, setting: str = "", benchmark: str | None = None) -> dict:
    """The record of one comparison: the medians of both sides' samples and their ratio
    ours / baseline. `paired`: the samples were taken in alternating A/B pairs, and the ratio
    is the median of the per-pair ratios (robust to the machine's load changing between pairs)."""
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', not {better!r}")
    a, b = _samples(ours_values), _samples(baseline_values)
    if paired and len(a) != len(b):
        raise ValueError(f"paired samples need equal counts, got {len(a)} and {len(b)}")
    ratio = statistics.median(x / y for x, y in zip(a, b)) if paired else statistics.median(a) / statistics.median(b)
    return {"benchmark": benchmark or Path(sys.argv[0]).stem, "setting": setting, "ours": ours, "baseline": baseline,
            "unit": unit, "better": better, "ours_median": statistics.median(a),
            "baseline_median": statistics.median(b), "samples": [len(a), len(b)], "paired": paired, "ratio": ratio}


def record(*args, **kwargs) -> dict:
    """`comparison(...)`, appended as a JSON line to $FORGEPLAY_BENCH_RESULTS when it is set."""
    rec = comparison(*args, **kwargs)
    path = os.environ.get(ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
    return rec

"""Runs of experiments/sft_tool_use.py over several training seeds as one table: exact match and
right answers per question type for each run (its `--json` file), then the mean, the spread and
how many runs meet a goal (exact match of at least `--goal`, comparison and arithmetic questions
both above zero). Given `--against` (the runs of another command on the same seeds, in the same
order) it adds each seed's difference and their mean, which is what a change does with the draw of
training examples held fixed.

    python experiments/seeds.py new0.json new1.json --against old0.json old1.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TYPES = ("comparison", "compositional", "bridge", "inference")  # compositional: the arithmetic questions


def load(path: Path) -> dict:
    """One run's figures after SFT: exact match, and (right, asked) per question type (all hop
    counts of a type together), and the options it was run with (absent in files written before
    the script recorded them). ValueError naming the file when it is not such a run's JSON."""
    from experiments.sft_tool_use import per_type

    try:
        data = json.loads(Path(path).read_text())
        types = per_type(data["before"], data["after"])
        em = float(data["after"]["em"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a --json file of experiments/sft_tool_use.py ({e})") from e
    return {"run": Path(path).stem, "em": em, "args": data.get("args", {}),
            **{t: types[t][1:] if t in types else (0, 0) for t in TYPES}}


def meets(run: dict, goal: float) -> bool:
    """Exact match of at least `goal`, and at least one comparison and one arithmetic question right."""
    return run["em"] >= goal - 1e-9 and run["comparison"][0] > 0 and run["compositional"][0] > 0


def summary(runs: list[dict], goal: float) -> dict:
    """Mean and spread of the runs' exact match, and how many meet the goal."""
    ems = [r["em"] for r in runs]
    return {"runs": len(runs), "mean": statistics.fmean(ems), "sd": statistics.stdev(ems) if len(ems) > 1 else 0.0,
            "min": min(ems), "max": max(ems), "goal_met": sum(meets(r, goal) for r in runs)}


def paired(runs: list[dict], against: list[dict]) -> dict:
    """Each pair's exact-match difference (runs minus against, in the given order), their mean,
    and how many went up, stayed and went down."""
    if len(runs) != len(against):
        raise ValueError(f"--against needs as many runs as there are runs: {len(runs)} against {len(against)}")
    diffs = [a["em"] - b["em"] for a, b in zip(runs, against)]
    return {"diffs": diffs, "mean": statistics.fmean(diffs), "up": sum(d > 1e-9 for d in diffs),
            "same": sum(abs(d) <= 1e-9 for d in diffs), "down": sum(d < -1e-9 for d in diffs)}


def table(runs: list[dict], goal: float) -> list[str]:
    """The runs as text rows, one per run, with a header."""
    head = f"{'run':<14}{'seed':>5}{'exact match':>13}" + "".join(f"{t:>15}" for t in TYPES) + "   goal"
    rows = [head]
    for r in runs:
        seed = r["args"].get("train_seed", "")
        rows.append(f"{r['run']:<14}{seed!s:>5}{r['em']:>13.3f}"
                    + "".join(f"{f'{k}/{n}':>15}" for k, n in (r[t] for t in TYPES))
                    + ("   met" if meets(r, goal) else "   -"))
    return rows


def report(runs: list[dict], goal: float, name: str) -> list[str]:
    """The table of `runs`, then a line of their summary under `name`."""
    s = summary(runs, goal)
    return table(runs, goal) + [
        f"{name}: mean exact match {s['mean']:.3f} (sd {s['sd']:.3f}, {s['min']:.3f} to {s['max']:.3f}) over "
        f"{s['runs']} runs; the goal (>= {goal}, comparison and arithmetic above zero) met in {s['goal_met']}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="--json files of experiments/sft_tool_use.py")
    ap.add_argument("--against", nargs="+", type=Path, default=None,
                    help="--json files of another command on the same training seeds, in the same order")
    ap.add_argument("--goal", type=float, default=0.25, help="the exact match a run must reach (default 0.25)")
    a = ap.parse_args(argv)
    try:
        runs = [load(p) for p in a.runs]
        against = [load(p) for p in a.against] if a.against else None
        pairs = paired(runs, against) if against else None
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(report(runs, a.goal, "runs")))
    if against:
        print()
        print("\n".join(report(against, a.goal, "against")))
        print()
        print("difference per seed: " + ", ".join(f"{d:+.3f}" for d in pairs["diffs"])
              + f"; mean {pairs['mean']:+.3f} (up {pairs['up']}, same {pairs['same']}, down {pairs['down']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Task yield with and without the examiner's warm-start, on the embedded model and a world.

Builds a world, fine-tunes an examiner on its warm-start demonstrations (`selfplay
warmstart`), then runs one self-play iteration (`selfplay run --no-train`) with the base
embedded model as examiner and again with the warm-started one, the same student, start
documents and seeds. Prints per arm: examiner outputs, tasks that pass the filter (the
yield), reject reasons, hop counts, and the students' k per task. Every figure comes from
the committed rows (DuckDB over the output datasets).

    .venv/bin/python experiments/selfplay_yield.py --root /tmp/yield --steps 60 --tasks 16
    .venv/bin/python experiments/selfplay_yield.py --root /tmp/yield --steps 60 --top-k 2 --train-layers 10 \
        --backend vllm-server    # shorter demonstrations, sampling on a vLLM server
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flows.selfplay import run_selfplay, run_warmstart  # noqa: E402
from generators.corpus.build import WorldConfig, write  # noqa: E402
from selfplay.play import PlayConfig  # noqa: E402
from selfplay.warmstart import WarmstartConfig  # noqa: E402
from storage import Catalog  # noqa: E402
from train.configs import TrainConfig  # noqa: E402


def arm(root: Path, name: str, examiner: str | None, student: str | None, a) -> dict:
    t = time.perf_counter()
    s = run_selfplay(PlayConfig(dataset="w", out=f"w_{name}", examiner=examiner, student=student, tasks=a.tasks,
                                attempts=a.attempts, seed=a.seed, batch_size=a.batch_size, train=False,
                                tool_style=a.tool_style, rollout_backend=a.backend), root, progress=True)
    it = s["iterations"][0]
    hops = {}
    if it["tasks"]:
        with Catalog(root) as cat:
            hops = dict(cat.rows(f"SELECT hop_count, count(*) FROM w_{name}_tasks GROUP BY 1 ORDER BY 1"))
    return {"arm": name, "examiner_outputs": it["examiner_outputs"], "tasks": it["tasks"],
            "yield": it["tasks"] / it["examiner_outputs"], "rejects": it["rejects"], "hop_counts": hops,
            "k_per_task": [x["k"] for x in it["scores"]], "student_em": it["student_em"],
            "seconds": round(time.perf_counter() - t)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", type=Path, required=True, help="data root (created)")
    ap.add_argument("--entities", type=int, default=400, help="world size")
    ap.add_argument("--steps", type=int, default=60, help="examiner SFT steps on the demonstrations")
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--batch", type=int, default=4, help="demonstrations per SFT step")
    ap.add_argument("--train-layers", type=int, default=0, help="fine-tune only the last N blocks (0 = all)")
    ap.add_argument("--tasks", type=int, default=16, help="examiner outputs per arm")
    ap.add_argument("--attempts", type=int, default=4, help="student attempts per task")
    ap.add_argument("--student", default=None, help="student model (default: embedded)")
    ap.add_argument("--tool-style", default="compact", help="tools in the student's prompts, as its SFT data had them")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--top-k", type=int, default=0,
                    help="results each demonstration search asks for (0: the tool's 5; 2 makes them about 1.6x shorter)")
    ap.add_argument("--backend", default="transformers", choices=["transformers", "vllm-server"],
                    help="where the examiner and the student sample (vllm-server: one server from .venv-vllm)")
    ap.add_argument("--reuse", action="store_true", help="keep the world and the examiner of an earlier run in --root")
    a = ap.parse_args()
    final = a.root / "examiner" / "final"
    if a.reuse and final.exists():
        for name, examiner in (("base", None), ("warm", str(final))):
            print(json.dumps(arm(a.root, name, examiner, a.student, a)), flush=True)
        return
    write(WorldConfig(seed=a.seed, entities=a.entities), a.root, "w")
    t = time.perf_counter()
    ws = run_warmstart(WarmstartConfig(dataset="w", out=str(a.root / "examiner"), train_layers=a.train_layers,
                                       top_k=a.top_k),
                       TrainConfig(max_steps=a.steps, lr=a.lr, batch_size=a.batch, checkpoint_every=0, seed=a.seed), a.root)
    print(json.dumps({"warmstart": ws["demos"], "sft_loss": [ws["training"]["first"].get("loss"),
                                                             ws["training"]["last"].get("loss")],
                      "seconds": round(time.perf_counter() - t)}), flush=True)
    for name, examiner in (("base", None), ("warm", ws["training"]["final_model"])):
        print(json.dumps(arm(a.root, name, examiner, a.student, a)), flush=True)


if __name__ == "__main__":
    main()

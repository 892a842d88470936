"""Does the teacher's dense guidance make the self-play student learn faster? Student exact
match on held-out world triples before and after each iteration, with distillation on and
off at equal student steps, on the embedded model (or a student you pass) and a world.

Both arms get the same tasks: each iteration's examine phase is replayed from fresh examiner
demonstrations of the world (selfplay/phases.py; a base 135M examiner poses almost no valid
task yet, see experiments/selfplay_yield.py), so the comparison isolates the student's
update. The student then attempts each task, the examiner and the student are updated by
the `selfplay` flow (resumed after the replayed phase), and the student is evaluated with
greedy tool-use rollouts on triples whose golden pages no demonstration touched. Prints per
arm and seed the EM curve and the seconds of each phase (teacher scoring included), and
writes them as JSON with --json.

    .venv/bin/python experiments/selfplay_distill.py --root /tmp/spd --iterations 2 --seeds 0 1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flows.selfplay import run_selfplay  # noqa: E402
from generators.corpus.build import WorldConfig, write  # noqa: E402
from generators.tools.base import base_rows  # noqa: E402
from generators.tools.simulator import Simulator  # noqa: E402
from selfplay.phases import replay_conversations, replay_examine  # noqa: E402
from selfplay.play import PlayConfig, run_id  # noqa: E402
from selfplay.warmstart import demonstrations, examiner_tool  # noqa: E402
from storage import load_table  # noqa: E402


def held_out(triples: list[dict], demos: list[dict], n: int) -> list[dict]:
    """Triples none of whose golden pages a demonstration searched or started from."""
    used = set()
    for d in demos:
        q = d["task"]["qcp"]
        used.add(q["seed_doc_id"])
        used.update(doc for hop in q["hops"] for doc in hop["doc_ids"])
    free = [t for t in sorted(triples, key=lambda t: t["triple_id"]) if not used & set(t["golden_doc_ids"])]
    return free[:n]


def exact_match(model: str | None, triples: list[dict], docs: list[dict], cfg: PlayConfig, served=None) -> float:
    """Greedy tool-use rollouts of `model` on `triples`, prompted as the attempts are; through
    `served` (a vLLM server the weights are published to) when given."""
    from generators.llm.transformers_backend import TransformersBackend
    from train.evaluate import summarize
    from train.grpo import make_prompts
    from train.rollout import rollout

    tools = base_rows()
    if served is not None:
        served.publish(model)
    backend = served or TransformersBackend(model, batch_size=cfg.batch_size)
    try:
        outs = rollout(backend, Simulator(docs, seed=cfg.seed, tools=tools), make_prompts(triples, tools, cfg.tool_style),
                       replace(cfg.rollout_config(cfg.student_turns), temperature=0.0), logprobs=False)
    finally:
        if served is None:
            backend.close()
    return summarize(outs)["em"]


def arm(root: Path, distill: str, seed: int, chunks: list[list[dict]], docs, evals, a, served=None) -> dict:
    cfg = PlayConfig(dataset="w", out=f"w_{distill}_{seed}", student=a.student, examiner=a.examiner,
                     tasks=a.tasks, attempts=a.attempts, seed=seed, batch_size=a.batch_size,
                     student_turns=a.turns, max_new_tokens=a.max_new_tokens, checkpoints=str(root / f"ck_{distill}_{seed}"),
                     examiner_steps=a.examiner_steps or a.steps, student_steps=a.steps, update_batch=a.update_batch, lr=a.lr,
                     distill=distill, train_layers=a.train_layers, warmstart=False, tool_style=a.tool_style,  # tasks are replayed demonstrations
                     **({"rollout_backend": "vllm-server", "rollout_url": served.client.server.url} if served else {}))
    curve, phases = [exact_match(a.student, evals, docs, cfg, served)], []
    print(json.dumps({"arm": distill, "seed": seed, "iteration": -1, "em": curve[0]}), flush=True)
    for it, chunk in enumerate(chunks):
        replay_examine(root, cfg, run_id(cfg, root), it, replay_conversations(chunk, docs), docs)
        s = run_selfplay(replace(cfg, iterations=it + 1, resume=True), root, progress=False)
        last = s["iterations"][-1]
        curve.append(exact_match(s["models"]["student"], evals, docs, cfg, served))
        phases.append({k: round(v, 1) for k, v in last.items() if k.endswith("_s")} | {"student_em_attempts": last["student_em"]})
        print(json.dumps({"arm": distill, "seed": seed, "iteration": it, "em": curve[-1], **phases[-1]}), flush=True)
    return {"arm": distill, "seed": seed, "em": curve, "phases": phases}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True, help="data root (created)")
    ap.add_argument("--entities", type=int, default=400, help="world size")
    ap.add_argument("--student", default=None, help="student model (default: embedded; one that already calls tools is better)")
    ap.add_argument("--examiner", default=None, help="examiner model (default: embedded)")
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--tasks", type=int, default=8, help="tasks per iteration (replayed demonstrations)")
    ap.add_argument("--attempts", type=int, default=4, help="student attempts per task")
    ap.add_argument("--steps", type=int, default=4, help="optimizer steps per update (both roles)")
    ap.add_argument("--examiner-steps", type=int, default=0,
                    help="the examiner's steps per update (0 = --steps; its tasks are replayed, so it only costs time)")
    ap.add_argument("--update-batch", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--train-layers", type=int, default=0)
    ap.add_argument("--tool-style", default="compact", help="tools in the student's prompts, as its SFT data had them")
    ap.add_argument("--turns", type=int, default=4, help="student turns per attempt and evaluation")
    ap.add_argument("--max-new-tokens", type=int, default=192)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--eval", type=int, default=32, help="held-out triples evaluated")
    ap.add_argument("--arms", nargs="+", default=["on", "off"], help="distillation on and/or off")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--backend", default="transformers", choices=["transformers", "vllm-server"],
                    help="what evaluates and samples the attempts: the model in this process, or one vLLM server "
                         "(from .venv-vllm) that each evaluated or attempting student is published to")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    t0 = time.perf_counter()
    write(WorldConfig(seed=7, entities=a.entities), a.root, "w")
    docs, triples = load_table("w", "documents", a.root).to_pylist(), load_table("w", "triples", a.root).to_pylist()
    tools = base_rows()
    demos = demonstrations(docs, triples, Simulator(docs, seed=0, tools=tools), examiner_tool(tools), n=0)[0]
    need = a.tasks * a.iterations
    if len(demos) < need:
        sys.exit(f"the world gives {len(demos)} demonstrations, {need} needed: use more --entities")
    chunks = [demos[i * a.tasks:(i + 1) * a.tasks] for i in range(a.iterations)]
    evals = held_out(triples, demos[:need], a.eval)
    served = None
    if a.backend == "vllm-server":
        from generators.llm.model_store import resolve_model
        from train.evaluate import sampling_backend

        served = sampling_backend("vllm-server", str(resolve_model(a.student)))
    try:
        results = [arm(a.root, d, s, chunks, docs, evals, a, served) for s in a.seeds for d in a.arms]
    finally:
        if served is not None:
            served.close()
    print(f"\nstudent EM on {len(evals)} held-out triples, before and after each iteration "
          f"({(time.perf_counter() - t0) / 60:.0f} min)")
    for r in results:
        print(f"  distill {r['arm']:>3}  seed {r['seed']}  " + "  ".join(f"{x:.3f}" for x in r["em"]))
    if a.json:
        a.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "results": results}, indent=1))


if __name__ == "__main__":
    main()

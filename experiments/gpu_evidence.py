"""One run that fits one GPU: SFT -> pi-Play with distillation on and off -> label-aware GRPO
with CARE, random and oracle CAG at equal label budget, all on the embedded model with the
transformers backend (on CUDA when there is one: training through train/stages.py, sampling
and evaluation through generators' TransformersBackend, device auto), and one table of
held-out exact match per arm and iteration.

Every stage is the project's own, nothing new is trained here:
1. SFT: a world (generators.corpus), the synthesize and validate flows, `train sft`
   (flows.train.run) on the validated trajectories.
2. pi-Play from the SFT model (experiments/selfplay_distill.py's `arm`: each iteration's
   examine phase replayed from fresh examiner demonstrations so both arms get the same tasks,
   then the `selfplay` flow's attempts, examiner and student updates, with distillation on
   or off), the student evaluated after each iteration.
3. Label-aware GRPO from the SFT model (`train grpo --labels STRATEGY --budget B`, flows.train.run)
   for care, random and oracle_cag with the same budget, the policy evaluated every
   `--eval-every` steps (the run resumed from its checkpoint in between).
Held-out triples: none a demonstration touched, none the SFT data was built from, none in
GRPO's prompt pool. Exact match is greedy multi-turn tool use (train/rollout.py).

    python experiments/gpu_evidence.py --root /tmp/gpu_evidence            # the GPU run
    python experiments/gpu_evidence.py --root /tmp/ge --tiny --model DIR   # seconds on CPU (the test)

Sizing for 10 minutes on one H200-class GPU (estimated, not measured: no GPU was lent to the
session that wrote this; the script prints each stage's seconds so the next run can check):
decoding the 135M model in lockstep costs about 10 ms per token step on a GPU (kernel-launch
bound, nearly flat in batch size), so a rollout phase of T turns x M new tokens costs about
T x M x 10 ms. Defaults: 3 turns x 128 tokens = ~4 s per rollout phase. SFT: 40 steps of 8
(~20 s with data synthesis). pi-Play: 10 iterations x 2 arms, each iteration one attempt
phase, one evaluation (32 triples), 4 + 4 optimizer steps and the teacher's scoring: ~12 s,
~4 min in all. GRPO: 3 arms x 30 steps of 4 prompts x group 4, each step one rollout phase
and the probes' teacher-forced pass: ~5 s, ~7.5 min; too much with evaluations, so GRPO
samples 2 turns x 96 tokens (~2 s a phase): ~3.5 min with 4 evaluations per arm. Total ~8
min plus model loads. `--tiny` shrinks every count to a smoke size.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.selfplay_distill import arm, exact_match, held_out  # noqa: E402

STRATEGIES = ("care", "random", "oracle_cag")


@dataclass
class Sizes:
    """Every count of the run (module docstring: how the defaults were sized)."""

    entities: int = 400
    trajectories: int = 160
    sft_steps: int = 40
    sft_batch: int = 8
    sft_layers: int = 0  # train only the top N blocks (0 = all)
    eval: int = 32
    iterations: int = 10
    tasks: int = 8
    attempts: int = 4
    steps: int = 4
    update_batch: int = 4
    turns: int = 3
    max_new_tokens: int = 128
    grpo_steps: int = 30
    eval_every: int = 10
    grpo_batch: int = 4
    group: int = 4
    pool: int = 160
    budget: float = 24.0  # 20% of the 30 x 4 prompts GRPO sees
    grpo_turns: int = 2
    grpo_tokens: int = 96


TINY = Sizes(entities=120, trajectories=16, sft_steps=2, sft_batch=2, eval=4, iterations=1, tasks=2, attempts=2,
             steps=1, update_batch=2, turns=1, max_new_tokens=16, grpo_steps=2, eval_every=1, grpo_batch=2, group=2,
             pool=8, budget=2.0, grpo_turns=1, grpo_tokens=16)


def sft(root: Path, model: str | None, z: Sizes, seed: int) -> str:
    """World, synthesis, validation and `train sft`; the SFT model's folder."""
    from flows.synthesize import run as synthesize
    from flows.train import run as train
    from flows.validate import run as validate
    from generators.corpus.build import WorldConfig, write
    from generators.llm.registry import BackendConfig
    from generators.synth.synthesize import SynthConfig
    from train.configs import SFTConfig, TrainConfig
    from validators.validator import ValidateConfig

    write(WorldConfig(seed=seed, entities=z.entities), root, "w")
    synthesize(SynthConfig(dataset="w", n=z.trajectories, seed=seed, tool_style="compact", variants_per_tool=0,
                           distractors_min=6, distractors_max=6, top_k_rate=1.0, top_k="1", texts="template",
                           reasoning="brief"), BackendConfig(), root, progress=False)
    validate(ValidateConfig(dataset="w", final_facts=False), None, root, progress=False)
    s = train("sft", SFTConfig(data="w", model=model, out=str(root / "sft"), max_len=2048, train_layers=z.sft_layers),
              TrainConfig(max_steps=z.sft_steps, batch_size=z.sft_batch, lr=3e-4, warmup_steps=min(3, z.sft_steps // 4),
                          checkpoint_every=0, seed=seed), root, progress=False)
    return s["final_model"]


def grpo_arm(root: Path, strategy: str, model: str, evals, docs, play_cfg, z: Sizes, seed: int, log) -> list[float]:
    """Label-aware GRPO with `strategy` from `model`, evaluated every `eval_every` steps."""
    from flows.train import run
    from train.configs import GRPOConfig, TrainConfig

    out = root / f"grpo_{strategy}"
    cfg = GRPOConfig(data="w", model=model, out=str(out), limit=z.pool, group_size=z.group, labels=strategy,
                     budget=z.budget, labels_out=f"w_labels_{strategy}", label_p=0.2, label_warmup=z.eval_every,
                     max_turns=z.grpo_turns, max_new_tokens=z.grpo_tokens, tool_style="compact", tool_seed=seed)
    curve = [exact_match(model, evals, docs, play_cfg)]
    for done in range(z.eval_every, z.grpo_steps + z.eval_every, z.eval_every):
        steps = min(done, z.grpo_steps)
        s = run("grpo", cfg, TrainConfig(max_steps=steps, batch_size=z.grpo_batch, lr=1e-5, schedule="constant",
                                         seed=seed, checkpoint_every=z.eval_every, resume=done > z.eval_every,
                                         keep_checkpoints=True),
                root, progress=False)
        curve.append(exact_match(s["final_model"], evals, docs, play_cfg))
        log({"arm": f"grpo {strategy}", "steps": steps, "em": curve[-1], "bought": z.budget - s["last"]["budget_left"]})
        if steps == z.grpo_steps:
            break
    return curve


def evidence(root: Path, z: Sizes, model: str | None = None, seed: int = 0, log=None) -> dict:
    """The whole run (module docstring); {"rows": [(arm, [em per iteration])], "seconds": {...}}."""
    from generators.tools.base import base_rows
    from generators.tools.simulator import Simulator
    from selfplay.warmstart import demonstrations, examiner_tool
    from storage import load_table
    from train.triples import pick_triples

    log = log or (lambda r: print(json.dumps(r), flush=True))
    if (root / "w").exists():  # its labels ledgers would count an earlier run's labels as paid
        raise SystemExit(f"{root} holds an earlier run: pass a new --root")
    root.mkdir(parents=True, exist_ok=True)
    seconds, rows, t = {}, [], time.perf_counter()
    sft_model = sft(root, model, z, seed)
    seconds["sft"] = time.perf_counter() - t
    docs, triples = load_table("w", "documents", root).to_pylist(), load_table("w", "triples", root).to_pylist()
    demos = demonstrations(docs, triples, Simulator(docs, seed=0, tools=base_rows()), examiner_tool(base_rows()), n=0)[0]
    need = z.tasks * z.iterations
    if len(demos) < need:
        raise SystemExit(f"the world gives {len(demos)} demonstrations, {need} needed: raise the world's size")
    chunks = [demos[i * z.tasks:(i + 1) * z.tasks] for i in range(z.iterations)]
    unseen = {t["triple_id"] for t in pick_triples(root, "w", "all", z.pool)}  # GRPO's pool
    unseen |= set(load_table("w", "trajectories", root, columns=["triple_id"]).column("triple_id").to_pylist())
    evals = held_out([t for t in triples if t["triple_id"] not in unseen], demos[:need], z.eval)
    if len(evals) < z.eval:
        raise SystemExit(f"only {len(evals)} held-out triples of {z.eval}: raise the world's size")
    a = argparse.Namespace(student=sft_model, examiner=model, tasks=z.tasks, attempts=z.attempts, batch_size=16,
                           turns=z.turns, max_new_tokens=z.max_new_tokens, examiner_steps=z.steps, steps=z.steps,
                           update_batch=z.update_batch, lr=1e-5, train_layers=0, tool_style="compact")
    for distill in ("on", "off"):
        t = time.perf_counter()
        r = arm(root, distill, seed, chunks, docs, evals, a)
        rows.append((f"pi-play distill {distill}", r["em"]))
        seconds[f"pi-play {distill}"] = time.perf_counter() - t
    from selfplay.play import PlayConfig

    play_cfg = PlayConfig(dataset="w", student=sft_model, student_turns=z.turns, max_new_tokens=z.max_new_tokens,
                          tool_style="compact", batch_size=16, seed=seed)  # evaluated as the pi-Play arms are
    for strategy in STRATEGIES:
        t = time.perf_counter()
        rows.append((f"grpo {strategy}", grpo_arm(root, strategy, sft_model, evals, docs, play_cfg, z, seed, log)))
        seconds[f"grpo {strategy}"] = time.perf_counter() - t
    return {"rows": rows, "seconds": seconds, "held_out": len(evals), "sft_model": sft_model}


def table(result: dict, z: Sizes) -> str:
    """Held-out exact match per arm (rows) and iteration (columns: before, then after each)."""
    width = max(len(em) for _, em in result["rows"])
    head = f"{'arm':24}" + "".join(f"{i:>7}" for i in range(width))
    lines = [f"held-out exact match on {result['held_out']} triples; column 0 = before, then after each "
             f"pi-Play iteration / each {z.eval_every} GRPO steps", head]
    lines += [f"{name:24}" + "".join(f"{x:7.3f}" for x in em) for name, em in result["rows"]]
    lines.append("seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in result["seconds"].items()))
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True, help="data root and run folders (created)")
    ap.add_argument("--model", default=None, help="the model to start from (default: the embedded one)")
    ap.add_argument("--tiny", action="store_true", help="every count at a smoke size (the CPU test)")
    ap.add_argument("--iterations", type=int, default=0, help="pi-Play iterations per arm (0 = the size's)")
    ap.add_argument("--grpo-steps", type=int, default=0, help="GRPO steps per strategy (0 = the size's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="write the rows and seconds here")
    a = ap.parse_args(argv)
    z = TINY if a.tiny else Sizes()
    z = replace(z, iterations=a.iterations or z.iterations, grpo_steps=a.grpo_steps or z.grpo_steps)
    started = time.perf_counter()
    result = evidence(a.root, z, a.model, a.seed)
    print("\n" + table(result, z) + f"\ntotal {time.perf_counter() - started:.0f} s")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

"""Which prompts should a label budget buy? A simulation on a world's triples whose answers are
held back, with a policy that answers (the embedded model after SFT: pass it as --model).

n answers are sampled once for every prompt of the pool (the first --prompts triples of
--dataset in the --triples set, multi-turn tool rollouts as `acquire-labels` samples them, with
the signals every strategy reads) and cached in --samples, so every strategy and every seed
sees the same groups and a rerun samples nothing. Per seed (which varies the pool's batch
order, the random strategy's draws and the probes' initialisation and training), each
strategy runs the acquisition loop over the pool in batches (score, buy the top --p of the
batch within --budget, CARE's probes learn from what was bought) and reports:
- `corrected`: the share of bought labels that corrected a wrong vote;
- `wrong_votes_fixed`: the share of the pool's wrong votes that a bought label replaced;
- `noise_before` / `noise_after`: the share of rollouts whose reward against the label used
  (the vote, or the bought label) disagrees with the true reward, before and after buying.
Each figure comes with a 95% bootstrap interval (prompts resampled, --bootstrap draws, the
seeds pooled); votes corrected also as a ratio to random's, and the noise left as how far it
is below random's, paired on the same resampled prompts (the reading when every vote is wrong
and every label bought corrects one). `--sft-steps` first fine-tunes the embedded model
briefly so that it answers. The picks of every strategy are also compared between binary
rewards (label-aware GRPO's default) and partial credit (`picks_changed`).
With --grpo-steps S > 0, label-aware GRPO (`train grpo --labels STRATEGY --budget B`) then
trains the model S steps per strategy on the same pool and greedy exact match is measured on
held-out triples (none in the pool or in the dataset's trajectories), before and after.

    .venv/bin/python experiments/acquire_sim.py --root DATA --dataset w --model RUN/final \\
        --prompts 96 --budget 16 --seeds 0 1 --json /tmp/acq.json

`--backend vllm-server` samples through one vLLM server (from .venv-vllm) for the whole run:
every answer in flight at once, GRPO publishing its weights to it after each step and the
evaluations reusing it; the strategies' hidden states and token probabilities still come
from a teacher-forced pass of the model in this process (acquire/group.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acquire.probes import Example, Probes  # noqa: E402
from acquire.session import AcquireConfig, Prompted, Session  # noqa: E402
from acquire.strategies import STRATEGIES, Context, choose  # noqa: E402
from experiments.acquire_grpo import grpo, held_out_em, pool_triples  # noqa: E402
from generators.answers import match  # noqa: E402
from storage import load_table  # noqa: E402


def sample(root, a, pool: list[dict], docs: list[dict], seed: int, served=None):
    """One group per pool triple: n answers with every strategy's signals. `served` (a vLLM
    server holding --model) samples when given; the signals come from a teacher-forced pass
    of --model here either way."""
    from acquire.group import scorer
    from generators.llm.transformers_backend import TransformersBackend
    from generators.tools.base import base_rows
    from generators.tools.simulator import Simulator

    cfg = AcquireConfig(dataset=a.dataset, strategy="care", model=a.model, n=a.n, batch=a.batch, seed=seed,
                        max_turns=a.max_turns, max_new_tokens=a.max_new_tokens, tool_style=a.tool_style,
                        temperature=a.temperature)
    tools = base_rows()
    backend = served or TransformersBackend(a.model, batch_size=max(8, a.n), turn_cache_mb=2048)
    lm = backend.lm or scorer(a.model)
    session = Session(cfg, root, backend, Simulator(docs, seed=seed, tools=tools), tools, None, None, None, lm=lm)
    prompts = [Prompted(t["triple_id"], t["question"], t["answer"], list(t.get("aliases") or []), t.get("hop_count"))
               for t in pool]
    groups = []
    try:
        for step, start in enumerate(range(0, len(prompts), a.sample_chunk)):
            groups += session.sample(prompts[start:start + a.sample_chunk], step)[0]
            print(f"  sampled {len(groups)}/{len(prompts)}", flush=True)
    finally:
        if served is None:
            backend.close()
    for g, p in zip(groups, prompts):
        g.true_label, g.aliases = p.answer, tuple(p.aliases)
    return groups, lm.config.hidden_size


def right(answer, g) -> bool:
    return isinstance(answer, str) and bool(answer) and match(answer, g.true_label, list(g.aliases)).em


def simulate(name: str, groups: list, hidden: int, a, seed: int, order: list[int] | None = None) -> dict:
    """The acquisition loop of one strategy over the sampled groups (module docstring), in
    `order`; per prompt (pool order): bought, vote wrong, rollouts off before and after."""
    strategy = STRATEGIES[name]
    probes = Probes(hidden, a.n, seed=seed) if strategy.needs == "states" else None
    order = order if order is not None else list(range(len(groups)))
    left, bought, picks = a.budget, set(), []
    for step, start in enumerate(range(0, len(order), a.batch)):
        batch = [groups[i] for i in order[start:start + a.batch]]
        scores = strategy.score(batch, Context(step=step, seed=seed, probes=probes, warmup=a.warmup, gate=a.gate))
        chosen = choose(batch, scores, a.p, left)
        left -= len(chosen)
        bought |= {g.prompt_id for g in chosen}
        picks.append([g.prompt_id for g in chosen])
        if probes is not None and chosen:
            probes.learn([Example.of(g, g.true_label) for g in chosen])
    per_prompt = []
    for g in groups:
        off_vote = sum(right(ans, g) != (bool(g.vote.label) and isinstance(ans, str) and match(ans, g.vote.label).em)
                       for ans in g.vote.answers)
        per_prompt.append((g.prompt_id in bought, not right(g.vote.label, g), off_vote,
                           0 if g.prompt_id in bought else off_vote))
    return {"strategy": name, "seed": seed, "picks": picks, "per_prompt": per_prompt, **metrics([per_prompt], a.n)}


def metrics(runs: list[list[tuple]], n: int, idx: list[int] | None = None) -> dict:
    """The figures of the module docstring over `runs` (one per seed), on the prompts `idx`."""
    idx = idx if idx is not None else list(range(len(runs[0])))
    rows = [run[i] for run in runs for i in idx]
    bought = sum(r[0] for r in rows)
    wrong = sum(r[1] for r in rows)
    fixed = sum(r[0] and r[1] for r in rows)
    return {"bought": bought / len(runs), "corrected": fixed / max(1, bought), "wrong_votes": wrong / len(runs),
            "wrong_votes_fixed": fixed / max(1, wrong), "noise_before": sum(r[2] for r in rows) / (n * len(rows)),
            "noise_after": sum(r[3] for r in rows) / (n * len(rows))}


def intervals(results: list[dict], names: list[str], n: int, draws: int, seed: int = 0) -> dict:
    """Per strategy and figure: (value, low, high) with 95% bootstrap intervals over prompts
    (the same resampled prompts for every strategy and seed), the ratio to random's votes
    corrected, and the reward noise it leaves below random's (`noise_below_random`, paired:
    both on the same resampled prompts; > 0: less noise left than random leaves)."""
    import random

    runs = {name: [r["per_prompt"] for r in results if r["strategy"] == name] for name in names}
    size = len(next(iter(runs.values()))[0])
    rng, keys = random.Random(seed), ("corrected", "wrong_votes_fixed", "noise_after")
    boot = {name: {k: [] for k in keys} for name in names}
    ratio = {name: [] for name in names}
    below = {name: [] for name in names}
    for _ in range(draws):
        idx = [rng.randrange(size) for _ in range(size)]
        base = metrics(runs["random"], n, idx) if "random" in runs else None
        for name in names:
            m = metrics(runs[name], n, idx)
            for k in keys:
                boot[name][k].append(m[k])
            if base and base["corrected"]:
                ratio[name].append(m["corrected"] / base["corrected"])
            if base:
                below[name].append(base["noise_after"] - m["noise_after"])

    def span(xs):
        xs = sorted(xs)
        return (xs[int(0.025 * len(xs))], xs[min(len(xs) - 1, int(0.975 * len(xs)))]) if xs else (float("nan"),) * 2

    out = {}
    for name in names:
        whole = metrics(runs[name], n)
        out[name] = {k: (whole[k], *span(boot[name][k])) for k in keys}
        out[name]["noise_before"] = whole["noise_before"]
        out[name]["bought"] = whole["bought"]
        if "random" in runs:
            base = metrics(runs["random"], n)
            out[name]["vs_random"] = (whole["corrected"] / base["corrected"] if base["corrected"] else float("nan"),
                                      *span(ratio[name]))
            out[name]["noise_below_random"] = (base["noise_after"] - whole["noise_after"], *span(below[name]))
    return out


def picks_changed(groups: list, hidden: int, a, names: list[str]) -> dict:
    """Per strategy: the share of its picks (seed 0) that differ when the step's rewards are
    partial credit (1 / 0.5 F1 plus a 0.1 format bonus) instead of binary."""
    from dataclasses import replace

    partial = [replace(g, reward="partial", format_weight=0.1) for g in groups]
    out = {}
    for name in names:
        b = {p for batch in simulate(name, groups, hidden, a, 0)["picks"] for p in batch}
        q = {p for batch in simulate(name, partial, hidden, a, 0)["picks"] for p in batch}
        out[name] = len(b ^ q) / 2 / max(1, len(b))
    return out


def prepare_policy(root: Path, a) -> str:
    """World + synthesis + validation + SFT of the embedded model (once: a finished SFT is reused)."""
    from experiments.gpu_evidence import Sizes, sft

    final = root / "sft" / "final"
    if final.exists():
        return str(final)
    started = time.perf_counter()
    model = sft(root, None, Sizes(entities=a.entities, trajectories=64, sft_steps=a.sft_steps, sft_batch=2, sft_layers=10), seed=0)
    print(f"SFT of the embedded model: {a.sft_steps} steps in {time.perf_counter() - started:.0f} s -> {model}", flush=True)
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, help="data root holding --dataset (a world with triples and documents)")
    ap.add_argument("--dataset", default="w")
    ap.add_argument("--model", default=None, help="the policy (an SFT run's final/; default: the embedded model)")
    ap.add_argument("--sft-steps", type=int, default=0,
                    help="first build a world into --root and fine-tune the embedded model on its synthesized "
                         "trajectories for this many steps of 2, top 10 blocks (experiments/gpu_evidence.py's SFT stage), so the "
                         "policy answers; the result is --model (0 = use --model as it is)")
    ap.add_argument("--entities", type=int, default=1000, help="--sft-steps: world size")
    ap.add_argument("--prompts", type=int, default=96, help="pool size: the first N triples of --triples in table order")
    ap.add_argument("--triples", default="all", help="the pool's set: all, or trained (those the policy's SFT "
                                                       "trajectories were built from; the held-out ones stay unseen)")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of the n answers and of GRPO")
    ap.add_argument("--n", type=int, default=8, help="answers per prompt")
    ap.add_argument("--batch", type=int, default=16, help="prompts per acquisition batch")
    ap.add_argument("--p", type=float, default=0.2, help="fraction of a batch to buy")
    ap.add_argument("--budget", type=float, default=16)
    ap.add_argument("--warmup", type=int, default=8, help="care: batches before stage 1 gates (the probes rank from the first)")
    ap.add_argument("--gate", type=float, default=0.1)
    ap.add_argument("--tool-style", default="compact", help="as the policy's SFT data (full or compact)")
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--strategies", nargs="+", default=sorted(STRATEGIES))
    ap.add_argument("--grpo-steps", type=int, default=0, help="label-aware GRPO steps per strategy (0 = simulation only)")
    ap.add_argument("--no-simulation", action="store_true",
                    help="skip sampling the pool and the acquisition simulation (GRPO and its evaluations only)")
    ap.add_argument("--batch-size", type=int, default=2, help="GRPO prompts per step")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--eval", type=int, default=32, help="held-out triples for exact match")
    ap.add_argument("--work", default="/tmp/acquire_sim", help="GRPO run folders; its name also names the runs' "
                                                               "labels datasets (a new --work starts with empty ledgers)")
    ap.add_argument("--train-layers", type=int, default=0, help="GRPO: train only the top N blocks (0 = all)")
    ap.add_argument("--backend", default="transformers", choices=["transformers", "vllm-server"],
                    help="what samples: the model in this process, or one vLLM server (from .venv-vllm) for the "
                         "whole experiment, which GRPO publishes its weights to and evaluations reuse")
    ap.add_argument("--samples", default="", help="the sampled pool's cache (default: ROOT/acquire_sim_samples.pt); "
                                                  "reused while the pool's settings match")
    ap.add_argument("--sample-seed", type=int, default=0, help="seed of the pool's one sampling")
    ap.add_argument("--sample-chunk", type=int, default=64, help="prompts sampled at a time (x --n answers in flight)")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap draws of the intervals")
    ap.add_argument("--json", default="", help="write every result here")
    a = ap.parse_args()
    root = Path(a.root)
    if a.sft_steps:
        a.model = prepare_policy(root, a)
    pool = pool_triples(root, a)
    docs = load_table(a.dataset, "documents", root).to_pylist()
    results = {"args": vars(a), "simulation": [], "grpo": []}
    served = None
    if a.backend == "vllm-server" and (a.grpo_steps or (not a.no_simulation and cached(a) is None)):
        from train.evaluate import sampling_backend

        served = sampling_backend("vllm-server", a.model)
    try:
        run_seeds(root, a, pool, docs, results, served)
    finally:
        if served is not None:
            served.close()
    if results["simulation"]:
        print("\n" + report(results, a))
    if results["grpo"]:
        print(f"\n{'strategy':16}" + "".join(f"{'seed ' + str(s):>16}" for s in a.seeds) + "   (held-out EM before -> after)")
        for name in a.strategies:
            rs = {r["seed"]: r for r in results["grpo"] if r["strategy"] == name}
            print(f"{name:16}" + "".join(f"{rs[s]['em_before']:>9.3f} {rs[s]['em_after']:.3f}" for s in a.seeds))


def sample_key(a) -> dict:
    return {k: getattr(a, k) for k in ("dataset", "model", "prompts", "triples", "temperature", "n", "max_turns",
                                       "max_new_tokens", "tool_style", "sample_seed")}


def samples_path(a) -> Path:
    return Path(a.samples or Path(a.root) / "acquire_sim_samples.pt")


def cached(a) -> dict | None:
    """--samples' content when it holds this pool's groups."""
    import torch

    path = samples_path(a)
    if not path.exists():
        return None
    saved = torch.load(path, weights_only=False)
    if saved["key"] != sample_key(a):
        print(f"{path} holds another pool ({saved['key']}): sampling again", flush=True)
        return None
    return saved


def pool_groups(root, a, pool, docs, served) -> tuple[list, int]:
    """The pool's groups: from --samples when it holds this pool's, else sampled once (seed
    --sample-seed) and saved there."""
    import torch

    saved = cached(a)
    if saved is not None:
        print(f"{len(saved['groups'])} groups from {samples_path(a)}", flush=True)
        return saved["groups"], saved["hidden"]
    path = samples_path(a)
    started = time.perf_counter()
    groups, hidden = sample(root, a, pool, docs, a.sample_seed, served)
    print(f"sampled {len(groups)} groups in {time.perf_counter() - started:.0f} s", flush=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"key": sample_key(a), "groups": groups, "hidden": hidden}, tmp)
    tmp.replace(path)  # whole or not at all
    return groups, hidden


def simulate_seeds(groups: list, hidden: int, a, results: dict) -> None:
    """Every strategy on every seed over the same groups (module docstring)."""
    import random

    print(f"votes right {sum(right(g.vote.label, g) for g in groups)}/{len(groups)}; answered "
          f"{sum(g.vote.valid for g in groups) / len(groups):.3f}", flush=True)
    for seed in a.seeds:
        order = list(range(len(groups)))
        random.Random(seed).shuffle(order)
        for name in a.strategies:
            started = time.perf_counter()
            r = simulate(name, groups, hidden, a, seed, order)
            results["simulation"].append(r)
            print(json.dumps({k: v for k, v in r.items() if k not in ("picks", "per_prompt")}
                             | {"s": round(time.perf_counter() - started, 1)}), flush=True)


def run_seeds(root, a, pool, docs, results: dict, served) -> None:
    if not a.no_simulation:
        groups, hidden = pool_groups(root, a, pool, docs, served)
        simulate_seeds(groups, hidden, a, results)
        results["intervals"] = intervals(results["simulation"], a.strategies, a.n, a.bootstrap)
        results["picks_changed"] = picks_changed(groups, hidden, a, a.strategies)
        if a.json:
            Path(a.json).write_text(json.dumps(results, indent=1))
    for seed in a.seeds if a.grpo_steps else []:
        base = held_out_em(root, a, a.model, served)
        for name in a.strategies:
            results["grpo"].append({"strategy": name, "seed": seed, "em_before": base,
                                    "em_after": grpo(root, a, name, seed, served)})
            print(json.dumps(results["grpo"][-1]), flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(results, indent=1))


def report(results: dict, a) -> str:
    """The simulation's table (markdown): each figure with its 95% bootstrap interval."""
    iv, changed = results["intervals"], results["picks_changed"]
    lines = ["| strategy | labels bought | votes corrected (share of bought) | x random | wrong votes fixed | "
             "reward noise before | reward noise left | noise left below random's | picks changed, partial vs binary |",
             "|---|---|---|---|---|---|---|---|---|"]
    f = lambda t: f"{t[0]:.3f} [{t[1]:.3f}, {t[2]:.3f}]"  # noqa: E731
    g = lambda t: f"{t[0]:+.4f} [{t[1]:+.4f}, {t[2]:+.4f}]"  # noqa: E731
    for name in a.strategies:
        m = iv[name]
        vs = f(m["vs_random"]) if "vs_random" in m else "-"
        below = g(m["noise_below_random"]) if "noise_below_random" in m else "-"
        lines.append(f"| {name} | {m['bought']:.1f} | {f(m['corrected'])} | {vs} | {f(m['wrong_votes_fixed'])} | "
                     f"{m['noise_before']:.3f} | {f(m['noise_after'])} | {below} | {changed[name]:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

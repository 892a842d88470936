"""Which prompts should a label budget buy? A simulation on a world's triples whose answers are
held back, with a policy that answers (the embedded model after SFT: pass it as --model).

Per seed, n answers are sampled once for every prompt of the pool (the first --prompts
triples of --dataset in the --triples set, multi-turn tool rollouts as `acquire-labels` samples them, with the
signals every strategy reads), so every strategy sees the same groups. Then each strategy
runs the acquisition loop over the pool in batches (score, buy the top --p of the batch
within --budget, CARE's probes learn from what was bought) and reports:
- `corrected`: the share of bought labels that corrected a wrong vote;
- `wrong_votes_fixed`: the share of the pool's wrong votes that a bought label replaced;
- `noise_before` / `noise_after`: the share of rollouts whose reward against the label used
  (the vote, or the bought label) disagrees with the true reward, before and after buying.
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
    lm = getattr(backend, "lm", None) or scorer(a.model)
    session = Session(cfg, root, backend, Simulator(docs, seed=seed, tools=tools), tools, None, None, None, lm=lm)
    prompts = [Prompted(t["triple_id"], t["question"], t["answer"], list(t.get("aliases") or []), t.get("hop_count"))
               for t in pool]
    groups = []
    try:
        for step, start in enumerate(range(0, len(prompts), a.batch)):
            groups += session.sample(prompts[start:start + a.batch], step)[0]
            print(f"  sampled {len(groups)}/{len(prompts)}", flush=True)
    finally:
        if served is None:
            backend.close()
    for g, p in zip(groups, prompts):
        g.true_label, g.aliases = p.answer, tuple(p.aliases)
    return groups, lm.config.hidden_size


def right(answer, g) -> bool:
    return isinstance(answer, str) and bool(answer) and match(answer, g.true_label, list(g.aliases)).em


def simulate(name: str, groups: list, hidden: int, a, seed: int) -> dict:
    """The acquisition loop of one strategy over the sampled groups (module docstring)."""
    strategy = STRATEGIES[name]
    probes = Probes(hidden, a.n, seed=seed) if strategy.needs == "states" else None
    left, bought, corrected = a.budget, set(), 0
    for step, start in enumerate(range(0, len(groups), a.batch)):
        batch = groups[start:start + a.batch]
        scores = strategy.score(batch, Context(step=step, seed=seed, probes=probes, warmup=a.warmup, gate=a.gate))
        chosen = choose(batch, scores, a.p, left)
        left -= len(chosen)
        bought |= {g.prompt_id for g in chosen}
        corrected += sum(not right(g.vote.label, g) for g in chosen)
        if probes is not None and chosen:
            probes.learn([Example.of(g, g.true_label) for g in chosen])
    wrong = [g for g in groups if not right(g.vote.label, g)]

    def noise(use_bought: bool) -> float:
        off = total = 0
        for g in groups:
            trusted = use_bought and g.prompt_id in bought
            for ans in g.vote.answers:
                true = right(ans, g)
                used = true if trusted else bool(g.vote.label) and isinstance(ans, str) and match(ans, g.vote.label).em
                off += used != true
                total += 1
        return off / total

    return {"strategy": name, "seed": seed, "bought": len(bought), "corrected": corrected / max(1, len(bought)),
            "wrong_votes": len(wrong), "wrong_votes_fixed": sum(g.prompt_id in bought for g in wrong) / max(1, len(wrong)),
            "noise_before": noise(False), "noise_after": noise(True)}


def grpo(root, a, name: str, seed: int, served=None) -> float:
    """Label-aware GRPO from --model with strategy `name`; held-out EM of the result. With
    `served`, GRPO samples from that server (publishing its weights after each step)."""
    from flows.train import run
    from train.configs import GRPOConfig, TrainConfig

    out = Path(a.work) / f"grpo_{name}_{seed}"
    labels = f"{a.dataset}_{Path(a.work).name}_{name}_{seed}"  # this run's labels and ledger
    if (Path(root) / labels).exists():  # its ledger would reuse what an earlier run bought
        raise SystemExit(f"{labels} already exists in {root}: an earlier run bought labels there; pass a new --work")
    rollout = {"rollout_backend": "vllm-server", "rollout_url": served.client.server.url} if served else {}
    cfg = GRPOConfig(data=a.dataset, model=a.model, out=str(out), limit=a.prompts, group_size=a.n, labels=name,
                     budget=a.budget, labels_out=labels, label_p=a.p, label_gate=a.gate,
                     label_warmup=a.warmup, max_turns=a.max_turns, max_new_tokens=a.max_new_tokens, tool_seed=seed,
                     tool_style=a.tool_style, train_layers=a.train_layers, triples=a.triples,
                     temperature=a.temperature, **rollout)
    if served:
        served.publish(a.model)  # every strategy starts from the same policy
    run("grpo", cfg, TrainConfig(max_steps=a.grpo_steps, batch_size=a.batch_size, lr=a.lr, schedule="constant",
                                 seed=seed, checkpoint_every=0), root, progress=False)
    return held_out_em(root, a, str(out / "final"), served)


def held_out_em(root, a, model, served=None) -> float:
    """Greedy held-out exact match of `model` (published to `served` when given)."""
    from generators.llm.transformers_backend import TransformersBackend
    from generators.tools.simulator import Simulator
    from train.evaluate import EvalConfig, base_tools, summarize
    from train.grpo import make_prompts
    from train.rollout import rollout

    cfg = EvalConfig(data=a.dataset, model=model, max_turns=a.max_turns, max_new_tokens=a.max_new_tokens,
                     tool_style=a.tool_style)
    docs = load_table(cfg.data, "documents", root).to_pylist()
    tools = base_tools(root, cfg.data)
    if served:
        served.publish(model)
    backend = served or TransformersBackend(cfg.model, batch_size=cfg.batch_size, turn_cache_mb=2048)
    try:
        outs = rollout(backend, Simulator(docs, seed=cfg.tool_seed, tools=tools),
                       make_prompts(eval_triples(root, a), tools, cfg.tool_style), cfg, logprobs=False)
    finally:
        if served is None:
            backend.close()
    return summarize(outs)["em"]


def eval_triples(root, a) -> list[dict]:
    """Held-out triples: after the pool in table order, none the trajectories were built from."""
    from train.evaluate import held_out_triples

    pool = {t["triple_id"] for t in pool_triples(root, a)}
    return [t for t in held_out_triples(root, a.dataset) if t["triple_id"] not in pool][:a.eval]


def pool_triples(root, a) -> list[dict]:
    """The prompts whose labels are held back: the first --prompts of the --triples set, in
    storage order (what GRPO's --limit and --triples take too)."""
    from train.triples import pick_triples

    return pick_triples(root, a.dataset, a.triples, a.prompts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, help="data root holding --dataset (a world with triples and documents)")
    ap.add_argument("--dataset", default="w")
    ap.add_argument("--model", default=None, help="the policy (an SFT run's final/; default: the embedded model)")
    ap.add_argument("--prompts", type=int, default=96, help="pool size: the first N triples of --triples in table order")
    ap.add_argument("--triples", default="all", help="the pool's set: all, or trained (those the policy's SFT "
                                                       "trajectories were built from; the held-out ones stay unseen)")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of the n answers and of GRPO")
    ap.add_argument("--n", type=int, default=8, help="answers per prompt")
    ap.add_argument("--batch", type=int, default=16, help="prompts per acquisition batch")
    ap.add_argument("--p", type=float, default=0.2, help="fraction of a batch to buy")
    ap.add_argument("--budget", type=float, default=16)
    ap.add_argument("--warmup", type=int, default=2, help="care: batches before the probes score and gate")
    ap.add_argument("--gate", type=float, default=0.1)
    ap.add_argument("--tool-style", default="compact", help="as the policy's SFT data (full or compact)")
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
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
    ap.add_argument("--json", default="", help="write every result here")
    a = ap.parse_args()
    root = Path(a.root)
    pool = pool_triples(root, a)
    docs = load_table(a.dataset, "documents", root).to_pylist()
    results = {"args": vars(a), "simulation": [], "grpo": []}
    served = None
    if a.backend == "vllm-server":
        from train.evaluate import sampling_backend

        served = sampling_backend("vllm-server", a.model)
    try:
        run_seeds(root, a, pool, docs, results, served)
    finally:
        if served is not None:
            served.close()
    if results["simulation"]:
        print(f"\n{'strategy':16}{'bought':>8}{'corrected':>11}{'fixed':>8}{'noise before':>14}{'after':>8}")
        for name in a.strategies:
            rs = [r for r in results["simulation"] if r["strategy"] == name]
            mean = lambda k: sum(r[k] for r in rs) / len(rs)  # noqa: E731
            print(f"{name:16}{mean('bought'):8.1f}{mean('corrected'):11.3f}{mean('wrong_votes_fixed'):8.3f}"
                  f"{mean('noise_before'):14.3f}{mean('noise_after'):8.3f}")
    if results["grpo"]:
        print(f"\n{'strategy':16}" + "".join(f"{'seed ' + str(s):>16}" for s in a.seeds) + "   (held-out EM before -> after)")
        for name in a.strategies:
            rs = {r["seed"]: r for r in results["grpo"] if r["strategy"] == name}
            print(f"{name:16}" + "".join(f"{rs[s]['em_before']:>9.3f} {rs[s]['em_after']:.3f}" for s in a.seeds))


def simulate_seed(root, a, pool, docs, seed: int, results: dict, served) -> None:
    """Sample the pool's groups once for `seed`, then run every strategy's acquisition over them."""
    started = time.perf_counter()
    groups, hidden = sample(root, a, pool, docs, seed, served)
    print(f"seed {seed}: sampled {len(groups)} groups in {time.perf_counter() - started:.0f} s; "
          f"votes right {sum(right(g.vote.label, g) for g in groups)}/{len(groups)}", flush=True)
    for name in a.strategies:
        r = simulate(name, groups, hidden, a, seed)
        results["simulation"].append(r)
        print(json.dumps(r), flush=True)


def run_seeds(root, a, pool, docs, results: dict, served) -> None:
    for seed in a.seeds:
        if not a.no_simulation:
            simulate_seed(root, a, pool, docs, seed, results, served)
        if a.grpo_steps:
            base = held_out_em(root, a, a.model, served)
            for name in a.strategies:
                results["grpo"].append({"strategy": name, "seed": seed, "em_before": base,
                                        "em_after": grpo(root, a, name, seed, served)})
                print(json.dumps(results["grpo"][-1]), flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

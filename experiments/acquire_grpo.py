"""The GRPO arm of experiments/acquire_sim.py: label-aware GRPO per strategy from the same
policy on the same pool, and greedy exact match on held-out triples before and after; with the
pool and held-out triples both arms read.

    em = grpo(root, args, "care", seed=0)   # args: acquire_sim.py's options
"""

from __future__ import annotations

from pathlib import Path

from storage import load_table


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

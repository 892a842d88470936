"""Does SFT on synthesized, validated trajectories teach the embedded model to use tools?

Every stage is the real one: a world corpus, the synthesize, validate and train-sft Prefect
flows, and greedy multi-turn rollouts through the BM25 simulator on held-out world triples
(none used by a trajectory), before and after SFT. Prints well-formed calls, answered
rollouts and exact match (all, and through tool use) before and after, and exact match per
question type and hop count.

What the 135M model needs to learn something it can use at evaluation time:
- the SFT data offers the tools the evaluation offers: the seven base search tools, and the
  calculator with `--calculator` (no paraphrased variants; every sample lists all of them), as
  compact one-line signatures;
- calls ask for one result (`top_k 1`), so every conversation fits in 2,048 tokens and none is
  dropped (with two results and a 1,600-token limit half were, all of them long sequential
  routes, and the model learned to answer after one tool turn);
- a turn may take 256 new tokens (`--max-new-tokens`; at 80, calls with long names were cut
  off; at 160, used before, a round of parallel calls whose think states a plan or facts was
  cut mid-call: 54 of the 958 assistant turns of `--reasoning plan --first-search general
  --rounds-weight 5 --calculator` data are longer). SFT's counts give the longest trained turn
  (`longest_turn`).

The data is what the recipe was tuned on: `--reasoning brief` by default (synthesize's own
default is `facts`, whose final thinks state the facts the answer follows from; in the
experiments the forms that state facts lowered this 135M model's exact match, experiments/README.md),
validated without the rule that rejects a final think stating no fact (`validate
--no-final-facts`: brief's final thinks of comparisons and yes/no questions name only the pages
compared, and the recipe trains on them as it always did), so its trajectories and figures are
those of the runs below whatever the defaults of `synthesize` and `validate` become.

SFT trains the last 10 transformer blocks (`--train-layers 10`, about twice as fast here);
`--train-layers 0` trains every parameter, as `train sft` does by default. A step takes 4
examples (`--batch-size`), so 25 steps train on 100 of the 240 synthesized trajectories.
Activation checkpointing is `auto` (train/memory.py: on where the step would not fit otherwise
or its activations outweigh the rest), so that two runs fit at a time. Besides exact match it prints
the tool calls per rollout and the share of them that found a page the question needs
(`found_per_call`), and with `--calculator`, per question type, how many rollouts called the
calculator and how many got the gold answer back from it (`calculator_use`). After SFT it reads
the rollouts (experiments/reading.py): where the searches went (the page named, a tool that
cannot see it, ...), whether the kind a think gives each lookup is the page's, and per question
type how many rollouts found every page they need, how many searched on after that and how many
answered before they had. Each exact match comes with its 95% interval (Wilson): on 48 questions
a figure near 0.25 spans about 0.15 to 0.39, so two runs that differ by less than that are not
told apart. `experiments/decisions.py --root ROOT` reads a finished run further: how sure its
model is where a chain goes on or ends, on the training trajectories it did not train on;
`experiments/seeds.py` puts the `--json` files of runs on several training seeds in one table.

The 48 held-out questions are the first by id that synthesis leaves unused when it draws
triples uniformly (written to ROOT/held_out.txt and asked through `train eval --hold-out`).
`--rounds-weight X` favours long questions in the training data (synthesize --rounds-weight) and
`--kinds-in-turn` lets its kinds of question take turns (synthesize --kinds-in-turn) and
`--asks-in-turn` what they ask of their last page (synthesize --asks-in-turn); synthesis
then holds that file's triples out, so the run is scored on the same questions. `--case-mix`
sets the reflection cases of the training data (by default 85% clean, 15% wrong arguments;
`repeat=...` adds lookups made twice, after which the think says the page was read before).

`--backend vllm-server` evaluates through one vLLM server (from .venv-vllm): it is started
once with the base model, and after SFT the fine-tuned weights are published to it, as GRPO
publishes its policy after each step; `transformers` evaluates in this process.

The slow test tests/train/test_sft_tool_use.py runs `run` small (a few steps, few held-out
triples); the exact-match figures come from the defaults:

    .venv/bin/python experiments/sft_tool_use.py --root /tmp/sftx --steps 25 --held-out 48

It measures the checkout it lives in (its folder goes first on the import path), so the
same run on two commits compares what they synthesize, e.g. the reasoning texts, with the
world, the held-out set and the training seed (`--train-seed`) fixed:

    git worktree add /tmp/before <commit>
    .venv/bin/python /tmp/before/experiments/sft_tool_use.py --root /tmp/b0 --backend vllm-server --train-seed 0
    .venv/bin/python experiments/sft_tool_use.py --root /tmp/a0 --backend vllm-server --train-seed 0
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASE_MIX = "clean=0.85,wrong_args=0.15"  # the reflection cases of the training data (synthesize --case-mix)


def run(root: Path, model: str, steps: int = 25, held_out: int = 48, n_traj: int = 240, seed: int = 5,
        train_layers: int = 10, batch_size: int = 4, backend: str = "transformers", train_seed: int = 0,
        reasoning: str = "brief", calculator: bool = False, rounds_weight: float = 0.0, first_search: str = "domain",
        kinds_in_turn: bool = False, asks_in_turn: bool = False, lr: float = 3e-4, max_new_tokens: int = 256,
        case_mix: str = CASE_MIX, neftune_alpha: float = 0.0, lead: str = "every", order: str = "shuffle",
        loss_type: str = "nll", log=print) -> dict:
    """World, synthesis, validation, evaluation before, SFT, evaluation after; the figures.
    `backend`: what evaluates (module docstring); `train_seed`: SFT's data order and torch seed (the
    world, the data and the held-out set stay the same, so two training seeds show the training noise)."""
    from flows.synthesize import run as synthesize
    from flows.train import run as train
    from flows.validate import run as validate
    from generators.corpus.build import WorldConfig, write
    from generators.llm.registry import BackendConfig
    from generators.synth.synthesize import SynthConfig
    from storage import load_table
    from train.configs import SFTConfig, TrainConfig
    from experiments.reading import chains, kinds, searches
    from generators.tools.simulator import Simulator
    from train.evaluate import EvalConfig, base_tools, eval_backend, evaluate, held_out_triples
    from validators.validator import ValidateConfig

    data, seconds = root / "data", {}
    started = time.perf_counter()
    write(WorldConfig(seed=seed, entities=1000), data, "w")
    synth = SynthConfig(dataset="w", n=n_traj, seed=seed, tool_style="compact", variants_per_tool=0,
                        distractors_min=6 + calculator, distractors_max=6 + calculator,  # every tool listed
                        top_k_rate=1.0, top_k="1", texts="template", case_mix=case_mix,
                        reasoning=reasoning, calculator=calculator, rounds_weight=rounds_weight, first_search=first_search,
                        kinds_in_turn=kinds_in_turn, asks_in_turn=asks_in_turn, lead=lead)
    split = root / "held_out.txt"  # the questions every run is scored on, whatever its mix picks
    split.write_text("\n".join(uniform_held_out(data, synth, held_out)) + "\n")
    mixed = uniform_draw(synth) != synth  # a draw that is not uniform: the held-out file is held out
    synthesize(replace(synth, hold_out=str(split)) if mixed else synth, BackendConfig(), data, progress=False)
    # as tuned: brief's final thinks of comparisons and yes/no questions pass (module docstring)
    validated = validate(ValidateConfig(dataset="w", final_facts=False), None, data, progress=False)
    seconds["data"] = time.perf_counter() - started

    ecfg = EvalConfig(data="w", limit=held_out, tool_style="compact", max_turns=5, max_new_tokens=max_new_tokens,
                      hold_out=str(split))
    triples = held_out_triples(data, "w", True, held_out, str(split))  # what `evaluate` asks, in its order
    held = {t["triple_id"] for t in triples}
    sim = Simulator(load_table("w", "documents", data).to_pylist(), seed=ecfg.tool_seed, tools=base_tools(data, "w"))
    trained_on = set(load_table("w", "trajectories", data, columns=["triple_id"]).column("triple_id").to_pylist())

    t = time.perf_counter()
    served = eval_backend(replace(ecfg, model=str(model), backend=backend)) if backend != "transformers" else None
    seconds["server_start"] = time.perf_counter() - t

    def measure(model_dir, name: str) -> dict:
        t = time.perf_counter()
        if served is None:  # `train eval`'s backend: the model loaded here, turns continue from their KV cache
            local = eval_backend(replace(ecfg, model=str(model_dir)))
            try:
                out, rolls = evaluate(local, data, ecfg)
            finally:
                local.close()
        else:
            if name == "after":  # the fine-tuned weights go to the running server
                seconds["publish"] = served.publish(model_dir)
            out, rolls = evaluate(served, data, ecfg)
        seconds[f"eval_{name}"] = time.perf_counter() - t
        with open(root / f"rollouts_{name}.jsonl", "w") as f:  # to read what the model did
            for r in rolls:
                f.write(json.dumps({"messages": r.messages, "reward": r.reward, "stats": r.stats}, default=str) + "\n")
        log(name, json.dumps({k: v for k, v in out.items() if k not in ("by_qtype", "config")}))
        said = [r.messages for r in rolls]
        return {**out, "calculator": calculator_use(triples, rolls), "searches": dict(searches(said, sim)),
                "kinds": dict(kinds(said, sim)),
                "chains": {q: dict(c) for q, c in chains(triples, said, [r.stats["finish"] for r in rolls]).items()}}

    try:
        before = measure(model, "before")
        t = time.perf_counter()
        sft = SFTConfig(data="w", model=str(model), out=str(root / "run"), max_len=2048, train_layers=train_layers,
                        neftune_alpha=neftune_alpha, loss_type=loss_type)
        summary = train("sft", sft, TrainConfig(max_steps=steps, batch_size=batch_size, lr=lr,
                                                warmup_steps=min(3, steps // 4), checkpoint_every=0, seed=train_seed,
                                                order=order),  # activation checkpointing: the default, auto
                        data, progress=False)
        seconds["sft"] = time.perf_counter() - t
        after = measure(summary["final_model"], "after")
    finally:
        if served is not None:
            served.close()
    return {"before": before, "after": after, "validated": validated, "held_out": sorted(held),
            "overlap": len(held & trained_on), "sft": summary, "seconds": seconds}


def main() -> None:
    from generators.synth.synth_config import FIRST_SEARCH, LEADS, REASONING
    from train.losses import SFT_LOSSES
    from train.trainer import ORDERS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True, help="work folder (created)")
    ap.add_argument("--model", default=None, help="model to fine-tune (default: the embedded one)")
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--held-out", type=int, default=48)
    ap.add_argument("--trajectories", type=int, default=240)
    ap.add_argument("--seed", type=int, default=5, help="seed of the world and of synthesis")
    ap.add_argument("--train-seed", type=int, default=0, help="SFT's data order and torch seed")
    ap.add_argument("--train-layers", type=int, default=10,
                    help="train only the last N transformer blocks (0 = every parameter, as `train sft` does)")
    ap.add_argument("--reasoning", default="brief", choices=REASONING,
                    help="what the synthesized thinks say (synthesize --reasoning; brief here, the texts this recipe "
                         "was tuned on, where synthesize's default is facts)")
    ap.add_argument("--calculator", action="store_true",
                    help="offer the calculator; a computed answer's trajectory calls it (synthesize --calculator)")
    ap.add_argument("--rounds-weight", type=float, default=0.0,
                    help="favour long questions in the training data (synthesize --rounds-weight); the held-out "
                         "questions stay those of uniform draws (synthesis holds them out)")
    ap.add_argument("--kinds-in-turn", action="store_true",
                    help="the kinds of question take turns in the training data (synthesize --kinds-in-turn); "
                         "the held-out questions stay the same")
    ap.add_argument("--asks-in-turn", action="store_true",
                    help="what the questions ask of their last page takes turns in the training data "
                         "(synthesize --asks-in-turn); the held-out questions stay the same")
    ap.add_argument("--lead", default="every", choices=LEADS,
                    help="which thinks of a computed answer open with the question's kind (synthesize --lead)")
    ap.add_argument("--first-search", default="domain", choices=FIRST_SEARCH,
                    help="the tool of the first round's lookups (synthesize --first-search)")
    ap.add_argument("--case-mix", default=CASE_MIX,
                    help="the reflection cases of the training data (synthesize --case-mix), e.g. "
                         "clean=0.7,wrong_args=0.15,repeat=0.15 adds trajectories that repeat a lookup and go on")
    ap.add_argument("--order", default="shuffle", choices=ORDERS,
                    help="SFT's data order (train sft --order): shuffle, or kinds (the kinds of question take turns, "
                         "so a seed's examples hold each kind about equally)")
    ap.add_argument("--batch-size", type=int, default=4,
                    help="examples per SFT step (train sft --batch-size); --steps x this many examples are trained on")
    ap.add_argument("--lr", type=float, default=3e-4, help="SFT's peak learning rate (warmup, then cosine decay)")
    ap.add_argument("--neftune-alpha", type=float, default=0.0,
                    help="NEFTune's noise on the input embeddings during SFT (train sft --neftune-alpha; 0 = off)")
    ap.add_argument("--loss-type", default="nll", choices=list(SFT_LOSSES),
                    help="SFT's per-token loss (train sft --loss-type: nll, or dft, cross entropy scaled by p)")
    ap.add_argument("--max-new-tokens", type=int, default=256,
                    help="tokens an evaluated turn may take (figures before this option used 160)")
    ap.add_argument("--backend", default="transformers", choices=["transformers", "vllm-server"],
                    help="what evaluates (module docstring)")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    from generators.llm.model_store import resolve_model

    r = run(a.root, str(resolve_model(a.model)), a.steps, a.held_out, a.trajectories, a.seed, backend=a.backend,
              train_seed=a.train_seed, train_layers=a.train_layers, reasoning=a.reasoning, calculator=a.calculator,
              rounds_weight=a.rounds_weight, first_search=a.first_search, lr=a.lr, batch_size=a.batch_size,
              kinds_in_turn=a.kinds_in_turn, asks_in_turn=a.asks_in_turn, max_new_tokens=a.max_new_tokens,
              case_mix=a.case_mix, neftune_alpha=a.neftune_alpha, lead=a.lead, order=a.order, loss_type=a.loss_type)
    print(f"\nSFT {a.steps} steps x {a.batch_size} on {r['sft']['counts']} ; loss {r['sft']['first']['loss']:.3f} -> "
          f"{r['sft']['last']['loss']:.3f}; seconds {json.dumps({k: round(v) for k, v in r['seconds'].items()})}")
    if r["sft"]["counts"]["longest_turn"] > a.max_new_tokens:
        print(f"the longest trained turn ({r['sft']['counts']['longest_turn']} tokens) does not fit an evaluated "
              f"turn ({a.max_new_tokens}, --max-new-tokens)")
    print(f"{'':18}{'before':>8}{'after':>8}")
    for k in ("well_formed", "answered", "em", "tool_em", "f1", "calls_per_rollout", "found_per_call"):
        print(f"{k:18}{r['before'][k]:8.3f}{r['after'][k]:8.3f}")
    n = r["after"]["rollouts"]
    for name in ("before", "after"):
        low, high = interval(round(r[name]["em"] * n), n)
        print(f"  em {name} 95% interval (Wilson, {n} questions): {low:.3f} to {high:.3f}")
    for q, v in r["after"]["by_qtype"].items():
        print(f"  em {q:18}{r['before']['by_qtype'][q]['em']:8.3f}{v['em']:8.3f}  ({v['rollouts']} triples)")
    for qtype, (before, after, n) in per_type(r["before"], r["after"]).items():
        print(f"  exact {qtype:15}{before:>4}/{n}{after:>5}/{n}")
    if a.calculator:
        for qtype, (called, right, n) in r["after"]["calculator"].items():
            print(f"  calculator {qtype:15} called {called}/{n}, gave the gold answer {right}/{n}")
    after = r["after"]
    print("searches after SFT: " + ", ".join(f"{k} {v}" for k, v in after["searches"].items()))
    print("lookups announced with a kind after SFT: " + ", ".join(f"{k} {v}" for k, v in after["kinds"].items()))
    for qtype, c in after["chains"].items():
        print(f"  {qtype:15} " + ", ".join(f"{k} {v}" for k, v in c.items()))
    if a.json:
        a.json.write_text(json.dumps({k: v for k, v in r.items() if k != "sft"} | {"sft_counts": r["sft"]["counts"]}
                                     | {"args": vars(a)}, indent=1, default=str))


def uniform_draw(synth):
    """`synth` drawing its triples uniformly: `rounds_weight` 0, neither kinds nor asks in turn,
    no hold-out (the options that change which triples are drawn, not their texts)."""
    return replace(synth, rounds_weight=0.0, kinds_in_turn=False, asks_in_turn=False, hold_out="")


def uniform_held_out(data: Path, synth, n: int) -> list[str]:
    """The first n triple ids (by id) that synthesis leaves unused when it draws uniformly
    (`uniform_draw`): the held-out set of every run on this world, the one the figures before
    `--rounds-weight` existed were measured on."""
    from generators.synth.synthesize import Session, load_inputs
    from generators.tools.bank import generate_bank

    uniform = uniform_draw(synth)
    tools = generate_bank(seed=uniform.seed, variants_per_tool=uniform.variants_per_tool, calculator=uniform.calculator).tools
    inputs = load_inputs(data, uniform.dataset)
    used = {p.triple_id for p in Session(inputs, uniform, tools).plans()}
    return sorted(t["triple_id"] for t in inputs.triples if t["triple_id"] not in used)[:n]


def interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a share k/n (95% at z = 1.96): how far an exact match on n
    held-out questions may be from the model's rate on questions like them."""
    if n <= 0:
        raise ValueError("an interval needs at least one question")
    p, z2 = k / n, z * z
    mid, half = (p + z2 / (2 * n)) / (1 + z2 / n), z * ((p * (1 - p) / n + z2 / (4 * n * n)) ** 0.5) / (1 + z2 / n)
    return max(0.0, mid - half), min(1.0, mid + half)


def calculator_use(triples: list[dict], rolls) -> dict[str, tuple[int, int, int]]:
    """Per question type: rollouts that called the calculator, rollouts where one of its results
    was the gold answer (as the reward matches answers), and rollouts (`rolls` are `evaluate`'s,
    in the order of `triples`)."""
    from generators.answers import match
    from generators.tools.compute import NAME

    out: dict[str, list[int]] = {}
    for t, r in zip(triples, rolls, strict=True):
        results = [json.loads(m["content"]).get("result") for m in r.messages
                   if m.get("role") == "tool" and m.get("name") == NAME]
        row = out.setdefault(t.get("qtype") or "other", [0, 0, 0])
        row[0] += bool(results)
        row[1] += any(match(str(v), str(t["answer"]), list(t.get("aliases") or [])).em for v in results if v is not None)
        row[2] += 1
    return {k: tuple(v) for k, v in sorted(out.items())}


def per_type(before: dict, after: dict) -> dict[str, tuple[int, int, int]]:
    """Exact answers before and after, and triples, per question type (summed over hop counts)."""
    out: dict[str, list[int]] = {}
    for key, v in after["by_qtype"].items():
        row = out.setdefault(key.split("/")[0], [0, 0, 0])
        row[0] += round(before["by_qtype"][key]["em"] * v["rollouts"])
        row[1] += round(v["em"] * v["rollouts"])
        row[2] += v["rollouts"]
    return {k: tuple(v) for k, v in sorted(out.items())}


if __name__ == "__main__":
    main()

"""The slow SFT experiment (tests/train/test_sft_tool_use.py) as a script: does the
reasoning text of the synthesized data change what the embedded model learns?

Same setup as the slow test: a world of 1,000 entities (seed 5), 240 trajectories
synthesized with program-written texts (compact tools, the seven base tools, `top_k 1`,
clean and wrong-argument cases), validated, then 25 SFT steps x 4 on the validated ones
(10 trained layers, lr 3e-4), and greedy tool-use rollouts on the same 48 held-out triples
before and after. `--seed` is the training seed (data order and torch); the world, the
synthesized data and the held-out set stay the same, so two seeds show the training noise.

It measures whatever code is first on the import path, so the same script compares two
checkouts (one run takes 25-40 minutes on two CPU cores):

    PYTHONPATH=$PWD .venv/bin/python experiments/sft_reasoning.py --seed 0
    PYTHONPATH=/tmp/main-checkout .venv/bin/python experiments/sft_reasoning.py --seed 1 --json before1.json

It prints exact match (and answered, well-formed) overall, per question type and per
question type/hops, before and after SFT, with counts. The before figures depend only on
the base model and the held-out set (greedy decoding), so `--before earlier.json` reuses
them and saves the slowest part of a run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # a fallback: PYTHONPATH decides the code measured


OPTIONS = [  # (flag, type, default, help); the defaults are the slow test's
    ("--seed", int, 0, "training seed: data order and torch (the slow test uses 0)"),
    ("--world-seed", int, 5, "seed of the world corpus"),
    ("--entities", int, 1000, "entities in the world"),
    ("--synth-seed", int, 5, "synthesis seed (fixes the data and the held-out set)"),
    ("--n", int, 240, "trajectories to synthesize"),
    ("--held-out", int, 48, "held-out triples to evaluate"),
    ("--steps", int, 25, "SFT optimizer steps (batch 4)"),
    ("--work", str, None, "folder for data and the trained model (default: a temporary one)"),
    ("--json", str, None, "also write the figures to this JSON file"),
    ("--before", str, None, "reuse the before-SFT figures of an earlier run's --json (greedy rollouts of the "
                            "base model on the same held-out set give the same figures; checked by triple id)"),
]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, kind, default, text in OPTIONS:
        p.add_argument(flag, type=kind, default=default, help=text)
    return p.parse_args(argv)


def em_table(before: dict, after: dict) -> list[tuple[str, str, str, str]]:
    """Rows (group, rollouts, EM before, EM after): overall, per question type, per type/hops."""
    def per_type(s: dict) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for key, v in s["by_qtype"].items():
            qtype = key.split("/")[0]
            hit, n = out.get(qtype, (0, 0))
            out[qtype] = (hit + round(v["em"] * v["rollouts"]), n + v["rollouts"])
        return out

    def cell(s: dict, key: str, groups: dict) -> str:
        hit, n = groups.get(key, (0, 0))
        return f"{hit}/{n} ({hit / n:.3f})" if n else "-"

    rows = [("overall", str(before["rollouts"]), f"{before['em']:.3f}", f"{after['em']:.3f}")]
    tb, ta = per_type(before), per_type(after)
    for q in sorted(tb):
        rows.append((q, str(tb[q][1]), cell(before, q, tb), cell(after, q, ta)))
    hb = {k: (round(v["em"] * v["rollouts"]), v["rollouts"]) for k, v in before["by_qtype"].items()}
    ha = {k: (round(v["em"] * v["rollouts"]), v["rollouts"]) for k, v in after["by_qtype"].items()}
    for k in sorted(hb):
        rows.append((k, str(hb[k][1]), cell(before, k, hb), cell(after, k, ha)))
    for rate in ("answered", "well_formed", "tool_em"):
        rows.append((rate, str(before["rollouts"]), f"{before[rate]:.3f}", f"{after[rate]:.3f}"))
    return rows


def print_table(rows, title: str) -> None:
    widths = [max(len(r[i]) for r in rows + [("group", "n", "EM before", "EM after")]) for i in range(4)]
    print(title)
    for r in [("group", "n", "EM before", "EM after")] + rows:
        print("  ".join(x.ljust(w) for x, w in zip(r, widths)))


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from flows.synthesize import run as synthesize
    from flows.train import run as train
    from flows.validate import run as validate
    from generators.corpus.build import WorldConfig, write
    from generators.llm.model_store import embedded_model_path
    from generators.llm.registry import BackendConfig
    from generators.synth.synthesize import SynthConfig
    from storage import load_table
    from train.configs import SFTConfig, TrainConfig
    from train.evaluate import EvalConfig, held_out_triples, run_eval
    from validators.runner import ValidateConfig

    import storage

    code = str(Path(storage.__file__).resolve().parents[1])
    work = Path(args.work or tempfile.mkdtemp(prefix="sft-reasoning-"))
    root, t0 = work / "data", time.perf_counter()
    print(f"code {code}\nwork {work}\nseed {args.seed}", flush=True)
    write(WorldConfig(seed=args.world_seed, entities=args.entities), root, "w")
    synth = SynthConfig(dataset="w", n=args.n, seed=args.synth_seed, tool_style="compact", variants_per_tool=0,
                        distractors_min=6, distractors_max=6, top_k_rate=1.0, top_k="1", texts="template",
                        case_mix="clean=0.85,wrong_args=0.15")
    s = synthesize(synth, BackendConfig(), root, progress=False)
    v = validate(ValidateConfig(dataset="w"), None, root, progress=False)
    print(f"synthesized {s['written']}, validated {v['rows_out']}/{v['rows_in']}", flush=True)

    held = [t["triple_id"] for t in held_out_triples(root, "w", True, args.held_out)]
    trained_on = load_table("w", "trajectories", root, columns=["triple_id"]).column("triple_id").to_pylist()
    assert not set(held) & set(trained_on)

    def measure(model_dir) -> dict:  # greedy rollouts, as the slow test's
        return run_eval(EvalConfig(data="w", model=str(model_dir), limit=args.held_out, tool_style="compact",
                                   max_turns=5, max_new_tokens=160, batch_size=16), root, progress=False)

    if args.before:
        earlier = json.loads(Path(args.before).read_text())
        assert earlier["held_out"] == held, "--before comes from a run with another held-out set"
        before = earlier["before"]
    else:
        before = measure(embedded_model_path())
    print(f"before em {before['em']:.3f}", flush=True)
    sft = SFTConfig(data="w", model=str(embedded_model_path()), out=str(work / "run"), max_len=2048, train_layers=10)
    summary = train("sft", sft, TrainConfig(max_steps=args.steps, batch_size=4, lr=3e-4, warmup_steps=3,
                                            checkpoint_every=0, seed=args.seed), root, progress=False)
    after = measure(summary["final_model"])
    minutes = (time.perf_counter() - t0) / 60
    print_table(em_table(before, after), f"\nexact match on {len(held)} held-out triples, training seed {args.seed} "
                                         f"({summary['counts']}, loss {summary['first']['loss']:.3f} -> "
                                         f"{summary['last']['loss']:.3f}, {minutes:.0f} min)")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "code": code, "held_out": held, "before": before,
                                               "after": after, "sft": summary["counts"],
                                               "validated": [v["rows_out"], v["rows_in"]]}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Can the embedded model subtract the years a compositional question asks for?

A computed answer ("How many years separate ...?") is the difference of two years read from
the pages. This asks the model, greedily and with two worked examples in the prompt, for the
differences of random pairs of four-digit years and counts the exact ones. If it cannot do
them here, a final think that shows the arithmetic cannot make it answer such questions; only
a tool that computes (`synthesize --calculator`) can.

    .venv/bin/python experiments/subtraction.py --pairs 20
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHOTS = ("Tranos was founded in 1783. Esia became independent in 1863. 1863 - 1783 = 80.\n"
         "Staimar was founded in 1231. The festival took place in 1866. 1866 - 1231 = 635.\n")


def run(model: str, pairs: int = 20, seed: int = 0) -> list[tuple[int, int, str]]:
    """(later year, earlier year, the model's completion) for `pairs` random pairs."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    lm = AutoModelForCausalLM.from_pretrained(model)
    rng, out = random.Random(seed), []
    for _ in range(pairs):
        a = rng.randint(1700, 1999)
        b = rng.randint(1200, a - 1)
        ids = tok(SHOTS + f"X was founded in {b}. Y took place in {a}. {a} - {b} =", return_tensors="pt").input_ids
        with torch.no_grad():
            gen = lm.generate(ids, max_new_tokens=6, do_sample=False)
        words = tok.decode(gen[0][ids.shape[1]:], skip_special_tokens=True).split()
        out.append((a, b, words[0].rstrip(".") if words else ""))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model folder (default: the embedded one)")
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    from generators.llm.model_store import resolve_model

    rows = run(str(resolve_model(a.model)), a.pairs, a.seed)
    for x, y, said in rows:
        print(f"{x} - {y} = {x - y:<5} model: {said}")
    print(f"exact: {sum(said == str(x - y) for x, y, said in rows)} of {len(rows)}")


if __name__ == "__main__":
    main()

"""How many of the corpus question builder's candidates survive its checks, and why the others
do not: `forgeplay corpus questions` with its default model (the embedded SmolLM2) on the
question-free test corpus (tests/generators/chain_corpus.py: 30 pages about made-up people,
places and organisations), beside the scripted stand-in on the same chains in the same run
(a peer whose questions are well-formed cloze questions except the ones it spoils on purpose).

Prints a markdown table: per reason, the candidates each model lost to it; the yield (kept
per chain) of each and their ratio; seconds per chain; then the embedded model's kept questions.

    .venv/bin/python experiments/corpus_questions.py --chains 24 [--author hops|path]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from generators.llm.registry import BackendConfig  # noqa: E402
from generators.llm.scripted import ScriptedBackend  # noqa: E402
from tests.generators.chain_corpus import write_corpus  # noqa: E402
from storage import load_table  # noqa: E402
from validators.chain_authors import AUTHORS  # noqa: E402
from validators.chain_checks import REASONS  # noqa: E402
from validators.chain_run import QuestionsConfig, run_questions  # noqa: E402
from validators.reasons import describe  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chains", type=int, default=24, help="chains per model (--max-chains)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default=None, help="model folder (default: the embedded SmolLM2)")
    ap.add_argument("--author", default="hops", choices=tuple(AUTHORS), help="how questions are written (--author)")
    args = ap.parse_args()
    results, kept = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for name, backend in (("scripted", ScriptedBackend()), ("embedded", None)):
            root = Path(tmp) / name
            write_corpus(root, "docs")
            cfg = QuestionsConfig(dataset="docs", max_chains=args.chains, seed=args.seed, chunk=8, author=args.author)
            start = time.perf_counter()
            report = run_questions(cfg, BackendConfig(model=args.model), root, backend=backend)
            results[name] = (report["funnel"], (time.perf_counter() - start) / max(1, report["funnel"]["chains"]))
            if name == "embedded" and report["funnel"].get("kept"):
                kept = load_table("docs", "triples", root).to_pylist()
    (fs, ts), (fe, te) = results["scripted"], results["embedded"]
    print("| | scripted stand-in | embedded SmolLM2 | meaning |\n|---|---:|---:|---|")
    print(f"| chains | {fs['chains']} | {fe['chains']} | chains of 2-3 passages taken |")
    for k in ("2 hops kept", "3 hops kept"):
        print(f"| {k} | {fs.get(k, 0)} | {fe.get(k, 0)} | |")
    for r in REASONS:
        print(f"| {r} | {fs.get(r, 0)} | {fe.get(r, 0)} | {describe(r)} |")
    ys, ye = fs.get("kept", 0) / fs["chains"], fe.get("kept", 0) / fe["chains"]
    print(f"| **kept (yield)** | {fs.get('kept', 0)} ({ys:.0%}) | {fe.get('kept', 0)} ({ye:.0%}) | "
          f"embedded / scripted yield = {ye / ys if ys else float('nan'):.2f} |")
    print(f"| seconds per chain | {ts:.2f} | {te:.1f} | author ({args.author}) and reader prompts, 2 CPU cores |")
    if kept:
        print("\nThe embedded model's kept questions:\n\n| hops | question | answer |\n|---:|---|---|")
        for t in kept:
            print(f"| {t['hop_count']} | {t['question']} | {t['answer']} |")


if __name__ == "__main__":
    main()

"""Where a chain of lookups goes on or ends: how sure a fine-tuned model is at those tokens, read
on training trajectories its SFT run did not train on, and how often the trained examples went
on at each of them (the prior the model can follow instead of the question).

With `--reasoning plan` texts two kinds of token decide how long a rollout's chain is:
- the first think's list of lookups ('To answer this I need "A", then the founder of A, then
  ...'): after each item "," goes on to another item and "." ends the list;
- a think after a result names the page it read, then says "Next" (another lookup, or the
  calculator) or "That was the last lookup".
Greedy rollouts take whichever the model rates higher, so one point where the right token gets
0.4 can decide a question. Teacher-forced on trajectories the run never saw, these points give
many more measurements than 48 held-out questions do, from one forward pass each.

    .venv/bin/python experiments/decisions.py --root /tmp/a0    # a run of experiments/sft_tool_use.py

reads ROOT/data (dataset "w"), the run's config and `metrics.jsonl` (the examples each step
trained on) and the fine-tuned model in ROOT/run/final.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PLAN = re.compile(r"To answer this I need (\"[^\n]*?)\. First I will")  # a list of lookups, not one round's names
GOES_ON = ", then "
AFTER = re.compile(r"\. (Next|That was the last lookup)\b")  # the word after the sentence that names the page


def points(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, str]]:
    """(character offset of the deciding token, what it decides) in a rendered trajectory, given its
    assistant spans (train.sft.assistant_spans): "item 2: goes on" or "item 2: ends" after each
    item of the first think's list, "result 1: next" or "result 1: last lookup" in the thinks after
    a round of results (counting the rounds whose think says either; a repair's think says
    neither)."""
    out, rounds = [], 0
    for k, (start, end) in enumerate(spans):
        think = re.search(r"<think>(.*?)</think>", text[start:end], re.S)
        if not think:
            continue
        at = start + think.start(1)
        body = think.group(1)
        if k == 0:
            plan = PLAN.search(body)
            if plan:
                items = plan.group(1)
                cut, item = 0, 1
                while (i := items.find(GOES_ON, cut)) >= 0:
                    out.append((at + plan.start(1) + i, f"item {item}: goes on"))
                    cut, item = i + len(GOES_ON), item + 1
                out.append((at + plan.end(1), f"item {item}: ends"))
        elif after := AFTER.search(body):
            rounds += 1
            out.append((at + after.start(1), f"result {rounds}: " + ("next" if after.group(1) == "Next" else "last lookup")))
    return out


def token_at(offsets: list[tuple[int, int]], char: int) -> int | None:
    """Index of the token that holds character `char` (None if a special token or nothing does)."""
    return next((t for t, (a, b) in enumerate(offsets) if a <= char < b), None)


def sureness(model, tokenizer, text: str, found: list[tuple[int, str]]) -> list[tuple[str, float, bool]]:
    """(what it decides, the probability the model gives the right token, whether it ranks it
    first) at each point, teacher-forced on `text`."""
    import torch

    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    at = [(token_at(enc["offset_mapping"], char), what) for char, what in found]
    at = [(t, what) for t, what in at if t]  # a token with one before it: its probability is read there
    if not at:
        return []
    ids = torch.tensor([enc["input_ids"][:max(t for t, _ in at) + 1]])  # nothing after the last point matters
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    out = []
    for t, what in at:
        probs = torch.softmax(logits[t - 1], -1)
        right = ids[0, t]
        out.append((what, probs[right].item(), bool(probs.argmax() == right)))
    return out


def kind(row: dict) -> str:
    """A trajectory's kind of question: "bridge/2", "compositional/3", ..."""
    from storage.schema import meta_of

    meta = meta_of(row)
    return f"{meta['qtype']}/{meta['hop_count']}"


def trained_rows(root: Path, tokenizer) -> tuple[list[dict], set[int], frozenset[str]]:
    """The trajectories in SFT's dataset order, the positions of those its steps trained on, and
    the injected errors whose turns it read as context."""
    from storage import load_table
    from train.configs import SFTConfig
    from train.sft import context_of, load_examples

    config = json.loads((root / "run" / "config.json").read_text())["sft"]
    cfg = SFTConfig(**config)
    examples, _ = load_examples(root / "data", cfg.data, tokenizer, cfg)
    by_id = {r["id"]: r for r in load_table(cfg.data, "trajectories", root / "data").to_pylist()}
    rows = [by_id[e["id"]] for e in examples]
    used = {i for line in (root / "run" / "metrics.jsonl").read_text().splitlines() for i in json.loads(line)["batch"]}
    return rows, used, context_of(cfg)


def measure(root: Path, limit: int = 0, progress: bool = True) -> dict:
    """{"unseen": {kind: {decision: (n, mean probability of the right token, share ranked first)}},
    "trained": {decision: count}} for the run in `root`: the decisions over the kinds of question
    of the examples SFT trained on (training seed 0's lists ended after their second item 23
    times and went on 48 times: the prior a model that does not read the question follows)."""
    import torch
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from train.sft import assistant_spans

    final = root / "run" / "final"
    tokenizer = AutoTokenizer.from_pretrained(final)
    model = AutoModelForCausalLM.from_pretrained(final, dtype=torch.float32).eval()
    rows, used, context = trained_rows(root, tokenizer)
    trained: Counter = Counter()
    seen: dict = defaultdict(lambda: defaultdict(list))
    found = [(i, text, points(text, spans)) for i, r in enumerate(rows)
             for text, spans in [assistant_spans(tokenizer, r["messages"], context)]]
    for i, _, at in found:
        if i in used:
            trained.update(what for _, what in at)
    unseen = [(i, text, at) for i, text, at in found if i not in used and at][:limit or None]
    for i, text, at in tqdm(unseen, desc="unseen trajectories", disable=not progress):
        for what, p, first in sureness(model, tokenizer, text, at):
            seen[kind(rows[i])][what].append((p, first))
    summary = {k: {what: (len(v), sum(p for p, _ in v) / len(v), sum(f for _, f in v) / len(v))
                   for what, v in sorted(d.items())} for k, d in sorted(seen.items())}
    return {"unseen": summary, "trained": dict(sorted(trained.items()))}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True, help="an experiments/sft_tool_use.py run's folder")
    ap.add_argument("--limit", type=int, default=0, help="read at most this many unseen trajectories that have a decision (0 = all)")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    missing = [p for p in ("data", "run/config.json", "run/metrics.jsonl", "run/final") if not (a.root / p).exists()]
    if missing:
        ap.error(f"{a.root} is not a finished experiments/sft_tool_use.py run: it has no {', '.join(missing)}")
    r = measure(a.root, a.limit)
    print(f"{'kind':16}{'decision':24}{'unseen':>7}{'p(right)':>10}{'ranked first':>14}{'trained on':>12}")
    for k, d in r["unseen"].items():
        for what, (n, p, first) in d.items():
            print(f"{k:16}{what:24}{n:7d}{p:10.2f}{first:14.2f}{r['trained'].get(what, 0):12d}")
    if a.json:
        a.json.write_text(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()

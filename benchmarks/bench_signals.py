"""Benchmark of the policy-side signals label acquisition reads (acquire/group.py `signals`:
hidden states, token log-probabilities, self-certainty of a prompt's n responses), on a
policy in training mode with activation checkpointing, as label-aware GRPO calls it.

    .venv/bin/python benchmarks/bench_signals.py [--prompt 1000] [--response 150] [--n 8] [--repeat 3]

Ours: `signals`, which reads the policy in evaluation mode without gradients, encodes the
prompt once and continues each response from its cached keys and values. Baselines in the
same run: one teacher-forced pass of prompt + response per response without gradients
(raw), and the same reading in training mode with gradients on, which is how `signals`
read GRPO's policy before (activation checkpointing turns the cache off there). Prints
seconds per group and the ratios; the embedded model, random token ids.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
from rich.console import Console
from rich.table import Table

from acquire.group import _signals, signals
from comparisons import record
from generators.llm.model_store import resolve_model


def raw(model, prompt: list[int], responses: list[list[int]]) -> list[torch.Tensor]:
    """The baseline: each whole sequence read once, last hidden state and log-probabilities."""
    out = []
    with torch.no_grad():
        for r in responses:
            o = model(input_ids=torch.tensor([prompt + r]), output_hidden_states=True)
            torch.log_softmax(o.logits[0, len(prompt) - 1:-1].float(), dim=-1)
            out.append(o.hidden_states[-1][0, -1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", type=int, default=1000, help="prompt tokens (a multi-turn tool prompt is ~1000)")
    ap.add_argument("--response", type=int, default=150, help="tokens per response")
    ap.add_argument("--n", type=int, default=8, help="responses per prompt (the group)")
    ap.add_argument("--repeat", type=int, default=3, help="timed groups per side, alternated")
    a = ap.parse_args()
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(resolve_model(None)), dtype=torch.float32)
    model.gradient_checkpointing_enable()
    model.train()  # as the GRPO step holds it
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, 40000, (a.prompt,), generator=g).tolist()
    responses = [torch.randint(100, 40000, (a.response,), generator=g).tolist() for _ in range(a.n)]
    ours, base, before = [], [], []
    for _ in range(a.repeat):  # alternated: the machine's load changes alike for every path
        t = time.perf_counter()
        s = signals(model, prompt, responses)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        with warnings.catch_warnings():  # the old path converts tensors that need grad to floats
            warnings.simplefilter("ignore")
            _signals(model, prompt, responses, None)  # training mode, gradients on: no cache, graphs built
        before.append(time.perf_counter() - t)
        model.eval()
        t = time.perf_counter()
        states = raw(model, prompt, responses)
        base.append(time.perf_counter() - t)
        model.train()
    drift = float((s["response_states"] - torch.stack(states).float()).abs().max())
    setting = f"prompt {a.prompt}, {a.n} x {a.response} tokens"
    rec = record("signals (prompt once, cached)", ours, "one pass per whole sequence", base, "s/group",
                 better="lower", paired=True, setting=setting)
    old = record("signals (prompt once, cached)", ours, "training mode, gradients on (before)", before, "s/group",
                 better="lower", paired=True, setting=setting)
    t = Table(title=f"acquisition signals of one group: prompt {a.prompt} tokens, {a.n} responses of {a.response} "
                    f"(hidden states agree to {drift:.1e}; torch threads {torch.get_num_threads()})")
    for c in ("path", "s / group (median)", "x baseline"):
        t.add_column(c)
    t.add_row("raw: one pass per whole sequence", f"{statistics.median(base):.2f}", "1.00")
    t.add_row("training mode, gradients on (before)", f"{statistics.median(before):.2f}",
              f"{statistics.median(before) / statistics.median(base):.2f}")
    t.add_row("signals (training-mode policy)", f"{statistics.median(ours):.2f}",
              f"{rec['ratio']:.2f} ({old['ratio']:.2f}x before)")
    Console().print(t)


if __name__ == "__main__":
    main()

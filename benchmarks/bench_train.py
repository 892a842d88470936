"""GRPO training speed: forgeplay's GRPOSession + Trainer against TRL's GRPOTrainer, and the
speed-up of shared-prefix grouping (train/prefix.py) on long prompts.

Table 1, in one run on the same model, prompts, group size and completion length: K timed
optimizer steps (after warm-up steps) of
  (a) TRL GRPOTrainer (use_cpu, float32, beta=0, num_iterations=1, loss_type dapo),
  (b) forgeplay GRPOSession + Trainer without prefix grouping, and
  (c) the same with prefix grouping (GRPOConfig.prefix_grouping, off by default).
Both sides: single turn (max_turns=1, no tools: TRL does not run our tool loop), no KL, one
update per generation batch, the same answer reward (train.reward), temperature 1, AdamW
with a constant learning rate, gradient clipping 1.0, `--prompts-per-step` prompts x
`--group-size` samples per step, every completion exactly `--completion-len` sampled tokens
(TRL: min_new_tokens; forgeplay: end-of-sequence ignored). forgeplay re-renders the
conversation with the chat template after sampling (train/rollout.py), so its trained
token count can differ a little from the sampled one; tokens/s counts the completion tokens
each trainer trains on. Steps/s and tokens/s are measured between step-end callbacks.

Table 2 (printed first): one GRPO loss forward + backward on a group of `--long-group` rollouts with a
`--long-prompt`-token prompt and completions of `--long-completion` MIN-MAX tokens, plain
path vs prefix grouping (median of `--long-repeats`, interleaved), and the largest gradient
difference between the two.

    python benchmarks/bench_train.py                      # tiny random Llama, SmolLM2 tokenizer
    python benchmarks/bench_train.py --model embedded     # SmolLM2-135M-Instruct
    python benchmarks/bench_train.py --skip-trl --long-prompt 2048

Numbers on a shared machine are noisy: compare the ratios, and use --rounds to repeat.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from comparisons import record  # noqa: E402

console = Console(width=None if Console().is_terminal else 110)


# ---- model and prompts ---------------------------------------------------------------

def tiny_model(out: Path, layers: int, hidden: int) -> Path:
    """A random-weight Llama with the embedded model's tokenizer, saved to `out`."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from generators.llm.model_store import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model(None))
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 4, num_hidden_layers=layers,
                      num_attention_heads=hidden // 64, num_key_value_heads=max(1, hidden // 128), head_dim=64,
                      max_position_embeddings=4096, tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def model_dir(args, tmp: Path) -> Path:
    if args.model == "tiny":
        return tiny_model(tmp / "tiny", args.layers, args.hidden)
    from generators.llm.model_store import resolve_model

    return Path(resolve_model(None if args.model == "embedded" else args.model))


def world(n: int, n_tools: int):
    """`n` GRPO prompts (system prompt offering the first `n_tools` tools of the bank + question),
    the corpus documents and those tools. The whole bank makes a ~3600-token system prompt."""
    from generators.corpus.build import WorldConfig, generate
    from generators.tools.bank import build_bank
    from train.grpo import make_prompts

    corpus = generate(WorldConfig(seed=3, entities=max(120, n * 2)))
    tools = build_bank(seed=0, variants_per_tool=1)[:n_tools]
    return make_prompts(corpus.triple_rows[:n], tools), corpus.document_rows, tools


class StepClock:
    """Step-end times and trained tokens; `summary` skips the warm-up steps."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.tokens: list[int] = []
        self.pending = 0

    def step_end(self, tokens: int) -> None:
        self.ends.append(time.perf_counter())
        self.tokens.append(tokens)

    def summary(self, name: str, warmup: int) -> dict:
        secs = self.ends[-1] - self.ends[warmup - 1]
        steps = len(self.ends) - warmup
        tokens = sum(self.tokens[warmup:])
        return {"name": name, "steps": steps, "seconds": secs, "tokens": tokens}


# ---- the two trainers ----------------------------------------------------------------

def run_trl(args, path: Path, prompts, out: Path) -> dict:
    import datasets
    import trl
    from transformers import TrainerCallback

    from train.reward import answer_reward

    clock = StepClock()

    def reward(completions, completion_ids, answer, aliases, **kwargs):
        clock.pending += sum(len(c) for c in completion_ids)
        return answer_reward(completions, answer, aliases)

    class Clock(TrainerCallback):
        def on_step_end(self, *a, **kw):
            clock.step_end(clock.pending)
            clock.pending = 0

    ds = datasets.Dataset.from_list([{"prompt": p.messages, "answer": p.answer, "aliases": p.aliases} for p in prompts])
    bs = args.prompts_per_step * args.group_size
    cfg = trl.GRPOConfig(
        output_dir=str(out), use_cpu=True, bf16=False, max_steps=args.warmup + args.steps,
        per_device_train_batch_size=bs, num_generations=args.group_size, gradient_accumulation_steps=1,
        max_completion_length=args.completion_len, generation_kwargs={"min_new_tokens": args.completion_len},
        temperature=1.0, top_p=1.0, beta=0.0, num_iterations=1, epsilon=0.2, loss_type="dapo",
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        report_to=[], save_strategy="no", logging_steps=10**6, disable_tqdm=not args.progress, seed=0)
    trainer = trl.GRPOTrainer(model=str(path), reward_funcs=reward, args=cfg, train_dataset=ds, callbacks=[Clock()])
    trainer.train()
    return clock.summary("TRL", args.warmup)


def run_ours(args, path: Path, prompts, docs, tools, out: Path, prefix: bool) -> dict:
    from transformers import AutoModelForCausalLM

    from generators.llm.transformers_backend import TransformersBackend
    from generators.tools.simulator import Simulator
    from train.grpo import GRPOConfig, GRPOSession
    from train.trainer import Trainer, TrainConfig

    model = AutoModelForCausalLM.from_pretrained(path)
    backend = TransformersBackend(path, batch_size=args.prompts_per_step * args.group_size, ignore_eos=True)
    backend.lm = model
    cfg = GRPOConfig(group_size=args.group_size, max_turns=1, max_new_tokens=args.completion_len, temperature=1.0,
                     top_p=1.0, kl_coef=0.0, clip_eps=0.2, prefix_grouping=prefix)
    session = GRPOSession(cfg, backend, Simulator(docs, seed=0, tools=tools), prompts, model)
    clock = StepClock()
    tcfg = TrainConfig(max_steps=args.warmup + args.steps, lr=args.lr, schedule="constant",
                       batch_size=args.prompts_per_step,
                       grad_accum=1, max_grad_norm=1.0, checkpoint_every=0, checkpoints_kept=1)
    Trainer(model, tcfg, out, session.step, on_step=lambda rec: clock.step_end(rec["tokens"])).fit(
        prompts, progress=args.progress)
    return clock.summary(f"forgeplay, prefix {'on' if prefix else 'off'}", args.warmup)


def table_trainers(args, path: Path, tmp: Path) -> None:
    n = args.prompts_per_step * (args.warmup + args.steps)
    prompts, docs, tools = world(n, args.tools)
    from transformers import AutoTokenizer

    from train.sft import template_messages

    tok = AutoTokenizer.from_pretrained(path)
    plen = statistics.mean(len(tok(tok.apply_chat_template(template_messages(p.messages), tokenize=False,
                                                          add_generation_prompt=True))["input_ids"]) for p in prompts)
    runs: dict[str, list[dict]] = {}
    for r in range(args.rounds):
        order = ["trl", "off", "on"] if r % 2 == 0 else ["on", "off", "trl"]
        for which in order:
            if which == "trl" and args.skip_trl:
                continue
            console.print(f"[dim]round {r + 1}/{args.rounds}: {which}[/dim]")
            out = tmp / f"{which}-{r}"
            res = run_trl(args, path, prompts, out) if which == "trl" else \
                run_ours(args, path, prompts, docs, tools, out, prefix=which == "on")
            runs.setdefault(res["name"], []).append(res)
    t = Table(title=f"GRPO steps ({args.model}; {args.prompts_per_step} prompts x G={args.group_size}, "
                    f"prompts ~{plen:.0f} tokens, {args.completion_len} completion tokens; "
                    f"{args.steps} timed steps x {args.rounds} rounds)")
    for col in ("trainer", "steps", "seconds", "steps/s", "tokens/step", "tokens/s", "vs TRL"):
        t.add_column(col, justify="left" if col == "trainer" else "right")
    rate = {name: statistics.median(x["steps"] / x["seconds"] for x in rs) for name, rs in runs.items()}
    base = rate.get("TRL")
    for name, rs in runs.items():
        steps, secs, toks = sum(x["steps"] for x in rs), sum(x["seconds"] for x in rs), sum(x["tokens"] for x in rs)
        t.add_row(name, str(steps), f"{secs:.1f}", f"{rate[name]:.3f}", f"{toks / steps:.0f}",
                  f"{statistics.median(x['tokens'] / x['seconds'] for x in rs):.1f}",
                  f"{rate[name] / base:.2f}x" if base else "-")
    console.print(t)
    setting = f"GRPO steps, {args.model} model, {args.prompts_per_step}x{args.group_size} rollouts a step"
    per_round = {name: [x["steps"] / x["seconds"] for x in rs] for name, rs in runs.items()}
    for ours, other in (("forgeplay, prefix off", "TRL"), ("forgeplay, prefix on", "TRL"),
                        ("forgeplay, prefix on", "forgeplay, prefix off")):
        if ours in per_round and other in per_round:
            record(ours, per_round[ours], other, per_round[other], "steps/s", paired=True, setting=setting)


# ---- prefix grouping on long prompts ----------------------------------------------------

def table_prefix(args, path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from train.losses import clipped_surrogate
    from train.prefix import grouped_token_logprobs, plain_token_logprobs

    model = AutoModelForCausalLM.from_pretrained(path).train()
    lo, hi = (int(x) for x in args.long_completion.split("-"))
    g = torch.Generator().manual_seed(0)
    vocab, p = model.config.vocab_size, args.long_prompt
    prompt = torch.randint(10, vocab, (p,), generator=g).tolist()
    lens = torch.randint(lo, hi + 1, (args.long_group,), generator=g).tolist()
    seqs = [prompt + torch.randint(10, vocab, (n,), generator=g).tolist() for n in lens]
    width = max(map(len, seqs))
    mask = torch.tensor([[float(p <= t < len(s)) for t in range(width)] for s in seqs])
    adv = torch.randn(len(seqs), generator=g)
    paths = {"plain": lambda: plain_token_logprobs(model, seqs, 0, start=p),
             "prefix grouping": lambda: grouped_token_logprobs(model, seqs, 0, len(seqs), start=p)}
    secs: dict[str, list[float]] = {k: [] for k in paths}
    grads: dict[str, list[torch.Tensor]] = {}
    from tqdm.auto import tqdm

    for _ in tqdm(range(args.long_repeats), desc="prefix table", disable=not args.progress):
        for name, fn in paths.items():
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            logp = fn()
            loss, _ = clipped_surrogate(logp, logp.detach(), adv, mask)
            loss.backward()
            secs[name].append(time.perf_counter() - t0)
            grads[name] = [q.grad.clone() for q in model.parameters()]
    # with old = current logprobs detached the loss value does not depend on them: compare gradients
    diff = max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))
               for a, b in zip(grads["prefix grouping"], grads["plain"]))
    t = Table(title=f"GRPO loss forward+backward, one group ({args.model}; G={args.long_group}, prompt {p} tokens, "
                    f"completions {lo}-{hi}; median of {args.long_repeats})")
    for col in ("path", "seconds", "speed-up"):
        t.add_column(col, justify="left" if col == "path" else "right")
    base = statistics.median(secs["plain"])
    for name in paths:
        med = statistics.median(secs[name])
        t.add_row(name, f"{med:.3f}", f"{base / med:.2f}x")
    console.print(t)
    console.print(f"largest gradient difference, relative to the parameter's largest gradient: {diff:.1e}")
    record("prefix grouping", secs["prefix grouping"], "plain", secs["plain"], "s", better="lower", paired=True,
           setting=f"GRPO loss fwd+bwd, {args.model} model, G={args.long_group}, prompt {p} tokens")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny", help="'tiny' (random Llama, SmolLM2 tokenizer), 'embedded' or a folder")
    ap.add_argument("--layers", type=int, default=4, help="layers of the tiny model")
    ap.add_argument("--hidden", type=int, default=256, help="hidden size of the tiny model (multiple of 128)")
    ap.add_argument("--prompts-per-step", type=int, default=2, help="distinct prompts per optimizer step")
    ap.add_argument("--group-size", type=int, default=4, help="samples per prompt (G)")
    ap.add_argument("--tools", type=int, default=3, help="tools offered in the system prompt (prompt length)")
    ap.add_argument("--completion-len", type=int, default=32, help="sampled tokens per completion (forced)")
    ap.add_argument("--steps", type=int, default=4, help="timed optimizer steps per trainer and round")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    ap.add_argument("--rounds", type=int, default=1, help="repeat both trainers (alternating order); medians")
    ap.add_argument("--lr", type=float, default=1e-5, help="learning rate (both)")
    ap.add_argument("--long-prompt", type=int, default=1024, help="prompt tokens of table 2")
    ap.add_argument("--long-completion", default="32-64", help="completion tokens MIN-MAX of table 2")
    ap.add_argument("--long-group", type=int, default=8, help="group size of table 2")
    ap.add_argument("--long-repeats", type=int, default=3, help="timed repeats of table 2")
    ap.add_argument("--skip-trl", action="store_true", help="table 1 without TRL")
    ap.add_argument("--skip-trainers", action="store_true", help="only table 2")
    ap.add_argument("--skip-prefix", action="store_true", help="only table 1")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    ap.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    args = ap.parse_args()
    if args.warmup < 1 or args.steps < 1 or args.rounds < 1:
        ap.error("--warmup, --steps and --rounds must be >= 1")
    if args.model == "tiny" and (args.hidden % 128 or args.hidden < 128):
        ap.error("--hidden must be a multiple of 128")
    try:
        lo, hi = (int(x) for x in args.long_completion.split("-"))
    except ValueError:
        ap.error(f"--long-completion must be MIN-MAX, e.g. 32-64, not {args.long_completion!r}")
    if not 1 <= lo <= hi:
        ap.error("--long-completion needs 1 <= MIN <= MAX")
    if args.threads:
        torch.set_num_threads(args.threads)
    console.print(f"torch threads: {torch.get_num_threads()}")
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        try:
            path = model_dir(args, Path(tmp))
        except (OSError, ValueError) as e:
            ap.error(f"--model {args.model}: {e}")
        if not args.skip_prefix:  # the short table first
            table_prefix(args, path)
        if not args.skip_trainers:
            table_trainers(args, path, Path(tmp))


if __name__ == "__main__":
    main()

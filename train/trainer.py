"""A small plain-PyTorch training loop shared by SFT and GRPO: AdamW, warmup + decay schedule,
gradient accumulation, gradient clipping, bf16 autocast on GPU, data-parallel training when
torch.distributed is initialised (gloo on CPU, nccl on GPU; train/dist.py), metrics JSONL,
and atomic checkpoints (train/checkpoint.py) with exact resume.

    trainer = Trainer(model, TrainConfig(max_steps=100), run_dir, step_fn, loss_weight="trained_tokens")
    trainer.fit(examples)          # examples: any sequence; step_fn(model, list_of_examples)

`step_fn(model, examples) -> (loss, stats)` computes the loss of one micro-batch. Each
optimizer step consumes `batch_size * grad_accum` examples per process; with N processes
each takes every N-th example of the global batch. Micro-batches are `batch_size` examples,
or, given the examples' token `lengths` and `max_batch_tokens`, a process's examples of the
step packed by length into micro-batches of at most that many tokens (train/packing.py
`token_batches`), so memory is bounded by tokens, not examples. The data order is a permutation per
epoch drawn from (seed, epoch) (with `--order kinds` and the examples' kinds, reordered so each
kind keeps its order and the kinds take turns), so the data position is just the count of examples
consumed: a resumed run takes exactly the batches the uninterrupted run would have taken.
Every step's record in `metrics.jsonl` lists the dataset indices it used (`batch`).

Loss normalisation: when the loss of a micro-batch is a mean over some units (SFT: labelled
tokens; GRPO token-mean: policy tokens) whose count the step reports in `stats[loss_weight]`,
the trainer backpropagates `loss * count`, sums gradients over micro-batches and ranks and
divides by the global count. The gradient is then that of the mean over every unit of the
global batch, whatever the split into processes and micro-batches: N processes with batch B
give the same step as 1 process with batch N*B (up to float rounding). Without
`loss_weight` every micro-batch weighs the same. The logged `loss` is the same global mean;
stats ending in "tokens" are summed over micro-batches and ranks, other stats averaged;
`tokens_per_s` and `peak_mem_gb` (the largest process's peak so far, train/memory.py) are
added to every record. Rank 0 alone writes metrics.jsonl and checkpoints; every rank restores
on resume.

Sharded (`--shard full|grad_op`, train/shard.py): the model, and the `frozen` models the step
reads beside it (a KL reference, a teacher), are split over the ranks with FSDP2 before the
optimizer is made; the backward reduce-scatters gradient sums, which are scaled as
above, so the step is the same; the ranks split micro-batches until they have equally many
(each forward and backward is a collective) and a micro-batch with nothing to train on still
runs a backward (times 0); every rank writes its shards of each checkpoint
(train/checkpoint.py `save_sharded`).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from generators.llm.cores import CoreShare
from train import checkpoint, dist
from train.configs import ORDERS, TrainConfig  # noqa: F401  (TrainConfig re-exported)
from train.memory import peak_memory_gb
from train.packing import token_batches
from train.shard import check_shard, full_tensor, shard_from_first

def make_scheduler(opt: torch.optim.Optimizer, cfg: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    def factor(step: int) -> float:
        if cfg.warmup_steps and step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.schedule == "constant":
            return 1.0
        span = max(1, cfg.max_steps - cfg.warmup_steps)
        frac = min(1.0, (step - cfg.warmup_steps) / span)
        return 1.0 - frac if cfg.schedule == "linear" else 0.5 * (1 + math.cos(math.pi * frac))

    if cfg.schedule not in ("constant", "linear", "cosine"):
        raise ValueError(f"schedule must be constant, linear or cosine, not {cfg.schedule!r}")
    return torch.optim.lr_scheduler.LambdaLR(opt, factor)




def dist_info() -> tuple[int, int]:
    """(rank, world size); (0, 1) without torch.distributed."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class Trainer:
    """Runs `step_fn` over `examples` for `cfg.max_steps` optimizer steps (module docstring)."""

    def __init__(self, model: torch.nn.Module, cfg: TrainConfig, run_dir: str | Path,
                 step_fn: Callable[[torch.nn.Module, list], tuple[torch.Tensor, dict]],
                 on_step: Callable[[dict], None] | None = None, loss_weight: str | None = None,
                 lengths: Sequence[int] | None = None, extras: dict | None = None,
                 kinds: Sequence[str] | None = None, frozen: Sequence[torch.nn.Module] = ()) -> None:
        if cfg.batch_size < 1 or cfg.grad_accum < 1 or cfg.max_steps < 1:
            raise ValueError("batch_size, grad_accum and max_steps must be >= 1")
        if cfg.max_batch_tokens < 0:
            raise ValueError(f"--max-batch-tokens must be >= 0, not {cfg.max_batch_tokens}")
        if cfg.order not in ORDERS:
            raise ValueError(f"--order must be one of {', '.join(ORDERS)}, not {cfg.order!r}")
        if cfg.order == "kinds" and kinds is None:
            raise ValueError("--order kinds: this stage's examples have no kinds")
        self.model, self.cfg, self.step_fn, self.on_step = model, cfg, step_fn, on_step
        self.kinds = list(kinds) if cfg.order == "kinds" else None  # each example's kind: the kinds take turns
        self._epoch_order: tuple[int, int, np.ndarray] | None = None  # (n, epoch, order): `_order`'s last
        self.extras = dict(extras or {})  # name -> object with state_dict(): checkpointed with the model
        self.lengths = list(lengths) if lengths is not None and cfg.max_batch_tokens else None
        self.loss_weight = loss_weight  # the stat the step's loss is a mean over (module docstring)
        self.run_dir = Path(run_dir)
        self.rank, self.world = dist_info()
        self.cores = CoreShare.claim(cfg.threads)  # each rank is one model process of the machine
        torch.manual_seed(cfg.seed)
        self.sharded = False  # --shard full|grad_op: FSDP2 units over the process group (train/shard.py)
        if check_shard(cfg.shard) != "none":
            if not dist.is_distributed():
                raise ValueError(f"--shard {cfg.shard} needs torch.distributed (train/dist.py init_from_env)")
            # each rank keeps its slice of rank 0's weights (the others may hold none: meta)
            self.sharded = shard_from_first(model, cfg.shard, cfg.bf16)
            for m in frozen:  # a reference or a teacher: forward only, sharded alike
                shard_from_first(m, cfg.shard, cfg.bf16, frozen=True)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.scheduler = make_scheduler(self.optimizer, cfg)
        self.step = 0
        self.consumed = 0  # examples of the global order consumed so far
        self.device = next(model.parameters()).device

    # ---- data order ------------------------------------------------------------------

    def _order(self, n: int, epoch: int) -> np.ndarray:
        """The epoch's permutation; with kinds, each kind keeps its order in it and the kinds take turns.
        Made once per epoch (every step reads it; the kinds' reordering sorts the whole epoch)."""
        if self._epoch_order is not None and self._epoch_order[:2] == (n, epoch):
            return self._epoch_order[2]
        perm = np.random.default_rng([self.cfg.seed, epoch]).permutation(n)
        if self.kinds is not None:
            from generators.synth.plan import in_turn

            perm = np.array(in_turn(perm.tolist(), lambda i: self.kinds[i]), dtype=perm.dtype)
        self._epoch_order = (n, epoch, perm)
        return perm

    def next_indices(self, n: int) -> list[int]:
        """Dataset indices of the next global batch; advances the data position."""
        need, out = self.cfg.batch_size * self.cfg.grad_accum * self.world, []
        while len(out) < need:
            epoch, pos = divmod(self.consumed, n)
            take = min(need - len(out), n - pos)
            out += self._order(n, epoch)[pos:pos + take].tolist()
            self.consumed += take
        return out

    # ---- checkpoints -------------------------------------------------------------------

    def save(self) -> None:
        if self.sharded:  # every rank writes its shards (torch.distributed.checkpoint)
            checkpoint.save_sharded(self.run_dir, self.step, self.model, self.optimizer, self.scheduler,
                                    {"consumed": self.consumed, "config": asdict(self.cfg)},
                                    keep=self.cfg.checkpoints_kept, extras=self.extras)
        elif self.rank == 0:
            checkpoint.save(self.run_dir, self.step, self.model, self.optimizer, self.scheduler,
                            {"consumed": self.consumed, "config": asdict(self.cfg)}, keep=self.cfg.checkpoints_kept,
                            extras=self.extras)
        if self.world > 1:
            torch.distributed.barrier()

    def try_resume(self) -> bool:
        path = checkpoint.latest(self.run_dir)
        if path is None:
            return False
        restore = checkpoint.restore_sharded if self.sharded else checkpoint.restore
        state = restore(path, self.model, self.optimizer, self.scheduler, extras=self.extras)
        self.step, self.consumed = state["step"], state["consumed"]
        metrics = self.run_dir / "metrics.jsonl"
        if metrics.exists() and self.rank == 0:  # drop records written after the checkpoint
            keep = [ln for ln in metrics.read_text().splitlines() if ln and json.loads(ln)["step"] <= self.step]
            metrics.write_text("".join(ln + "\n" for ln in keep))
        return True

    def micro_batches(self, mine: list[int]) -> list[list[int]]:
        """This process's examples of a step, split into micro-batches (module docstring)."""
        if self.lengths is not None:
            groups = token_batches([self.lengths[i] for i in mine], self.cfg.max_batch_tokens)
            return [[mine[j] for j in g] for g in groups]
        bs = self.cfg.batch_size
        return [mine[m * bs:(m + 1) * bs] for m in range(self.cfg.grad_accum)]

    def even_micro_batches(self, micros: list[list[int]]) -> list[list[int]]:
        """Sharded: every rank's micro-batches split until each rank has as many (each forward and
        backward is a collective); a rank's largest micro-batch is halved first. Ranks hold equally
        many examples, so the most micro-batches any rank has is within reach."""
        target = max(dist.gather_all(len(micros)))
        micros = [list(m) for m in micros]
        while len(micros) < target:
            i = max(range(len(micros)), key=lambda j: len(micros[j]))
            half = len(micros[i]) // 2
            micros[i:i + 1] = [micros[i][:half], micros[i][half:]]
        return micros

    # ---- loop --------------------------------------------------------------------------

    def train_step(self, examples: Sequence) -> dict:
        """One optimizer step over the next global batch; returns its metrics record."""
        started = time.perf_counter()
        self.cores.refresh()
        idx = self.next_indices(len(examples))
        mine = idx[self.rank::self.world]
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        totals: dict[str, float] = {}
        loss_sum = weight = 0.0  # sum of loss * weight, sum of weights (this rank)
        use_bf16 = self.cfg.bf16 and self.device.type == "cuda"
        micros = self.micro_batches(mine)
        if self.sharded:
            micros = self.even_micro_batches(micros)
        for part in micros:
            micro = [examples[i] for i in part]
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=use_bf16):
                loss, stats = self.step_fn(self.model, micro)
            w = float(stats[self.loss_weight]) if self.loss_weight else 1.0
            if w > 0:  # a micro-batch with nothing to train on adds nothing (and its mean is nan)
                (loss * w).backward()
                loss_sum += float(loss.detach()) * w
                weight += w
            elif self.sharded:  # the other ranks' backward waits on this one's: a backward of nothing
                if not torch.isfinite(loss.detach()).all():
                    raise ValueError("--shard: a micro-batch with nothing to train on gave a loss of nan")
                (loss * 0.0).backward()
            for k, v in stats.items():
                totals[k] = totals.get(k, 0.0) + float(v)
        parts = dist.gather_all((loss_sum, weight, totals, len(micros), peak_memory_gb(self.device)))
        total_weight = sum(p[1] for p in parts)
        scale = 1.0 / total_weight if total_weight else 0.0
        if self.sharded:  # FSDP reduce-scattered each gradient's sum over ranks in the backward
            dist.scale_grads(list(self.model.parameters()), scale)
        else:
            dist.reduce_grads(list(self.model.parameters()), scale)
        norm = 0.0
        if self.cfg.max_grad_norm > 0:
            norm = float(full_tensor(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)))
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        secs = time.perf_counter() - started
        loss_mean = sum(p[0] for p in parts) / total_weight if total_weight else float("nan")
        rec = {"step": self.step, "loss": loss_mean, "lr": lr, "grad_norm": norm, "seconds": secs, "batch": idx}
        keys = dict.fromkeys(k for p in parts for k in p[2])  # every rank's stats, in order
        n_micro = sum(p[3] for p in parts)
        for k in keys:  # "tokens" and other counts are summed, the rest averaged
            v = sum(p[2].get(k, 0.0) for p in parts)
            rec[k] = v if k.endswith("tokens") else v / n_micro
        if "tokens" in rec:
            rec["tokens_per_s"] = rec["tokens"] / secs if secs else 0.0
        rec["micro_batches"], rec["peak_mem_gb"] = n_micro, round(max(p[4] for p in parts), 3)
        return rec

    def fit(self, examples: Sequence, progress: bool = True, stop_after: int | None = None) -> list[dict]:
        """Train until `cfg.max_steps` (or `stop_after` steps in this call); resumes first when
        `cfg.resume`. Returns this call's metrics records."""
        if not len(examples):
            raise ValueError("no training examples")
        if self.cfg.resume:
            self.try_resume()
        if not self.sharded:  # (sharded ranks took their slices of rank 0's weights)
            dist.broadcast_params(self.model)  # ranks start equal (loaded alike; this makes sure)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        from tqdm.auto import tqdm

        bar = tqdm(total=self.cfg.max_steps, initial=self.step, desc="train", unit="step",
                   disable=not progress or self.rank != 0)
        records, done = [], 0
        while self.step < self.cfg.max_steps and (stop_after is None or done < stop_after):
            rec = self.train_step(examples)
            records.append(rec)
            done += 1
            if self.rank == 0:
                with open(self.run_dir / "metrics.jsonl", "a") as f:
                    f.write(json.dumps(rec) + "\n")
            post = {"loss": f"{rec['loss']:.4f}"}
            for k in ("reward", "tokens_per_s", "peak_mem_gb"):
                if k in rec:
                    post[k] = f"{rec[k]:.3g}"
            bar.set_postfix(post)
            bar.update(1)
            if self.on_step:
                self.on_step(rec)
            every = self.cfg.checkpoint_every
            if (every and self.step % every == 0) or self.step == self.cfg.max_steps:
                self.save()
        bar.close()
        return records


def read_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln] if path.exists() else []


def plot_metrics(run_dir: str | Path, keys: Sequence[str] = ("loss",), out: str = "curves.png") -> Path | None:
    """A PNG of the metric curves over steps (one panel per key present); None if no metrics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = read_metrics(run_dir)
    keys = [k for k in keys if any(k in r for r in recs)]
    if not recs or not keys:
        return None
    fig, axes = plt.subplots(len(keys), 1, figsize=(6, 2.5 * len(keys)), squeeze=False)
    for ax, k in zip(axes[:, 0], keys):
        pts = [(r["step"], r[k]) for r in recs if k in r]
        ax.plot([p[0] for p in pts], [p[1] for p in pts])
        ax.set_ylabel(k)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("step")
    fig.tight_layout()
    path = Path(run_dir) / out
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path

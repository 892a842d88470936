"""The memory plan of a training run, made before its first step: the expected peak of one
process (weights, gradients, optimizer state, the activations of the largest micro-batch, the
logits, frozen models and generation, the runtime), checked against the memory the run may use,
so a run that cannot fit stops with one line naming the settings to change instead of being
killed by the kernel; and the activation-checkpointing decision that goes with it.

    work = Workload(tokens=8192, logit_positions=600, what="8192 tokens a micro-batch",
                    settings="--max-batch-tokens")
    plan = make_plan(model, work, train_cfg)      # decides checkpointing for "auto"
    print(plan.line())                            # memory plan: ... peak 3.9 GB of 17.2 GB
    plan.check()                                  # MemoryPlanError (a ValueError) when it cannot fit
    plan.apply(model)                             # switch checkpointing on or off

The activation estimate counts, per token and decoder block, the tensors a Llama-style block
keeps for its backward pass in float32 (`ModelShape.block_floats`); with checkpointing a block
keeps only its input and one block is recomputed at a time. The logits are computed in chunks of
`LOGIT_CHUNK` positions (train.losses.chunked_token_logprobs), so they cost the same at any
length. `benchmarks/bench_train_memory.py` prints the plan next to the measured peak.

`auto` checkpointing is on when it is needed to fit, and whenever the activations without it
would take more memory than the weights, gradients and optimizer state together (long sequences:
there it divides the peak several times for about a third more compute); `on` and `off` force it.
The limit is `--memory-gb`, else this process's memory plus what the machine has available
(MemAvailable, or the cgroup's limit; shared by the processes of a CPU `--nproc` run), or on a GPU
its free memory. `peak_memory_gb()` is the peak the metrics record.

Sharding (`--shard`, train/shard.py) over N processes divides the model's state; per process,
with P parameters (T trainable), B those of the largest decoder block, R those outside the
blocks (embeddings, output layer, final norm) and c bytes a gathered weight takes (2 in bf16
on a GPU, else 4):

    none     weights 4P      + gradients 4T   + optimizer 8T   (AdamW's two moments)
    full     weights 4P/N    + gradients 4T/N + optimizer 8T/N + gathered c(R + 2B) + 4 max(2B, R)
    grad_op  weights 4P/N    + gradients 4T/N + optimizer 8T/N + gathered cP       + 4 max(2B, R)

`gathered` is what FSDP holds whole for a pass: `full` keeps the root unit and two blocks (the
one computing, the next being gathered) and `grad_op` every unit from its forward to its
backward; both add the unsharded float32 gradients of two blocks (or of the root) before their
reduce-scatter. A stage that samples (GRPO) gathers the whole model, cP, while it samples.
Frozen models (a reference, a teacher) are sharded with the policy: 1/N of their weights plus
their root and two blocks gathered for a pass. Activations, logits and the KV cache are per
process as without sharding.
`forgeplay train plan --model-size 7e9 --nproc 8` prints the model's state under each setting
for a decoder of `--layers` 32 blocks holding all its parameters (B = P/32, R = 0), in bf16 on
GPUs: none 16P = 112.0 GB; full 16P/8 + 12B = 14.0 + 2.625 = 16.6 GB; grad_op 16P/8 + 2P + 8B
= 14.0 + 14.0 + 1.75 = 29.8 GB. Loading adds nothing on a GPU: sharded under torchrun, rank 0
reads the weights into host memory (4P there), the other ranks build the model without
weights, and each rank receives its slices a tensor at a time (train/shard.py).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass, field

GB = 1e9
LOGIT_CHUNK = 512  # positions projected to the vocabulary at once (train.losses.chunked_token_logprobs)
RUNTIME = 0.7 * GB  # python, torch, tokenizer and data, measured on the embedded model's runs
CHECKPOINTING = ("auto", "on", "off")
SHARDS = ("none", "full", "grad_op")  # --shard (train/shard.py)


class MemoryPlanError(ValueError):
    """The planned peak exceeds the memory the run may use (one line naming what to change)."""


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs of a model: sizes of a Llama-style decoder and its parameter counts."""

    layers: int
    hidden: int
    intermediate: int
    q_dim: int  # attention heads x head dim
    kv_dim: int  # key-value heads x head dim
    heads: int
    vocab: int
    params: int
    trainable: int
    active_layers: int  # blocks from the lowest trainable one up (they keep activations)
    bytes_per_param: int = 4
    block_params: int = 0  # the largest decoder block's parameters (an FSDP unit, train/shard.py)
    root_params: int = 0  # parameters outside the blocks: embeddings, output layer, final norm

    @classmethod
    def of(cls, model) -> "ModelShape":
        c = model.config
        c = getattr(c, "text_config", None) or c
        heads = c.num_attention_heads
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
        layers = c.num_hidden_layers
        params = list(model.parameters())
        trainable = sum(p.numel() for p in params if p.requires_grad)
        total, blocks = sum(p.numel() for p in params), _block_sizes(model, layers)
        return cls(layers, c.hidden_size, getattr(c, "intermediate_size", 4 * c.hidden_size), heads * head_dim,
                   getattr(c, "num_key_value_heads", heads) * head_dim, heads, c.vocab_size,
                   total, trainable, _active_layers(model, layers),
                   params[0].element_size() if params else 4, max(blocks, default=0), total - sum(blocks))

    def block_floats(self) -> int:
        """Floats one token keeps for the backward pass of one block: the two RMSNorms (input,
        scale, output), the rotated queries and keys, values, attention output and its
        contiguous copy, the log-sum-exp per head, and the MLP's gate, up, activation and product."""
        return 6 * self.hidden + 3 * self.q_dim + 2 * self.kv_dim + self.heads + 4 * self.intermediate


def _block_sizes(model, layers: int) -> list[int]:
    """Parameters of each decoder block (the ModuleList of `layers` modules; [] without one)."""
    import torch

    blocks = next((m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == layers), [])
    return [sum(p.numel() for p in b.parameters()) for b in blocks]


def _active_layers(model, layers: int) -> int:
    """Blocks at or above the lowest block with a trainable parameter (all, when the embeddings train)."""
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if emb is not None and any(p.requires_grad for p in emb.parameters()):
        return layers
    for name, p in model.named_parameters():
        if p.requires_grad and ".layers." in name:
            return layers - int(name.split(".layers.")[1].split(".")[0])
    return 0


@dataclass
class Workload:
    """The largest step one process makes: `tokens` in one forward-backward pass of the trained
    model (`passes` of them alive at once), `logit_positions` projected to the vocabulary,
    frozen models' forward passes `(shape, tokens)`, generation KV-cache tokens, and for the
    error line what it is (`what`) and the settings that shrink it (`settings`)."""

    tokens: int
    logit_positions: int
    what: str
    settings: str
    passes: int = 1
    full_logits: int = 0  # positions whose whole-vocabulary logits are kept (e.g. a teacher KL)
    frozen: list = field(default_factory=list)  # [(ModelShape, tokens)]
    generation_tokens: int = 0  # rows x length held in a KV cache while sampling
    checkpointing_blocked: str | bool = ""  # why checkpointing cannot be used (auto keeps it off)


@dataclass
class Plan:
    """Bytes per part, the checkpointing decision, the limit (module docstring)."""

    parts: dict
    checkpointing: bool
    limit: float
    work: Workload
    shard: str = "none"
    world: int = 1

    @property
    def peak(self) -> float:
        return sum(self.parts.values())

    def line(self) -> str:
        ck = "checkpointing" if self.checkpointing else "no checkpointing"
        if self.shard != "none":
            ck += f", --shard {self.shard} over {self.world}"
        parts = ", ".join(f"{k} {v / GB:.2f}" for k, v in self.parts.items() if v >= 0.005 * GB)
        return (f"memory plan: {parts} GB ({self.work.what}, {ck}): peak {self.peak / GB:.1f} GB "
                f"of {self.limit / GB:.1f} GB")

    def check(self) -> None:
        if self.peak > self.limit:
            more = "" if self.checkpointing else ", turn on --activation-checkpointing"
            if self.shard == "none":
                more += ", shard the model over more processes (--shard full --nproc N)"
            elif self.shard == "grad_op":
                more += ", use --shard full"
            raise MemoryPlanError(
                f"training needs about {self.peak / GB:.1f} GB ({self.work.what}; "
                f"{', '.join(f'{k} {v / GB:.1f}' for k, v in self.parts.items() if v >= 0.05 * GB)}) but "
                f"{self.limit / GB:.1f} GB is available: lower {self.work.settings}{more}, or raise --memory-gb")

    def apply(self, model) -> None:
        """Switch the model's activation checkpointing to the plan's decision."""
        if self.checkpointing:
            model.gradient_checkpointing_enable({"use_reentrant": False})
        elif getattr(model, "is_gradient_checkpointing", False):
            model.gradient_checkpointing_disable()

    def as_dict(self) -> dict:
        return {"peak_gb": round(self.peak / GB, 3), "limit_gb": round(self.limit / GB, 3),
                "checkpointing": self.checkpointing, **{f"{k}_gb": round(v / GB, 3) for k, v in self.parts.items()}}


def check_shard(mode: str) -> str:
    if mode not in SHARDS:
        raise ValueError(f"--shard must be one of {', '.join(SHARDS)}, not {mode!r}")
    return mode


def size_shape(params: float, layers: int = 32) -> ModelShape:
    """A decoder of `params` parameters, all in `layers` equal blocks (`forgeplay train plan`)."""
    if params <= 0 or layers < 1:
        raise ValueError(f"--model-size must be > 0 and --layers >= 1, not {params} and {layers}")
    p = int(params)
    return ModelShape(layers, 0, 0, 0, 0, 0, 0, p, p, layers, 4, p // layers, p - layers * (p // layers))


def state_table(params: float, world: int, layers: int = 32, compute: int = 2) -> dict[str, dict]:
    """--shard setting -> the model's state per process in bytes (`state_parts`, plus "total")."""
    if world < 1:
        raise ValueError(f"--nproc must be >= 1, not {world}")
    shape = size_shape(params, layers)
    rows = {mode: state_parts(shape, mode, world, compute) for mode in SHARDS}
    return {mode: {**parts, "total": sum(parts.values())} for mode, parts in rows.items()}


def activation_bytes(shape: ModelShape, tokens: int, checkpointing: bool) -> float:
    """Activations of one forward-backward pass over `tokens` tokens (module docstring)."""
    block, active = shape.block_floats(), shape.active_layers
    if not active:
        return 0.0
    kept = active * shape.hidden + block if checkpointing else active * block  # + one recomputed block
    return 4.0 * tokens * (kept + block / 2 + 4 * shape.hidden)  # + one block's gradients, embeddings, norm


def frozen_bytes(shape: ModelShape, tokens: int, shard: str = "none", world: int = 1, compute: int = 4) -> float:
    """A frozen model: its weights and the largest transient of a forward pass without gradients.
    Sharded with the policy (train/shard.py): 1/N of its weights, plus its root unit and two
    blocks gathered for the pass."""
    transient = 4.0 * tokens * (shape.block_floats() / 2 + 2 * shape.hidden)
    weights = shape.params * shape.bytes_per_param
    if check_shard(shard) != "none":
        weights = weights / world + compute * (shape.root_params + 2 * shape.block_params)
    return weights + transient + 4.0 * LOGIT_CHUNK * shape.vocab * 2


def make_plan(model, work: Workload, cfg, device=None, limit: float | None = None,
              checkpointing: bool | None = None, shard: str | None = None, world: int | None = None) -> Plan:
    """The plan for `model` (its trainable parameters as they are now) under TrainConfig `cfg`
    (`checkpointing`, `shard`, `world` given: those instead of the config's)."""
    mode = getattr(cfg, "activation_checkpointing", "auto")
    if checkpointing is not None:
        mode = "on" if checkpointing else "off"
    if mode not in CHECKPOINTING:
        raise ValueError(f"--activation-checkpointing must be one of {', '.join(CHECKPOINTING)}, not {mode!r}")
    if mode == "on" and work.checkpointing_blocked:
        raise ValueError(f"--activation-checkpointing on: {work.checkpointing_blocked}")
    shape = ModelShape.of(model)
    if limit is None:
        limit = memory_limit(cfg, device)
    shard = check_shard(shard or getattr(cfg, "shard", "none"))
    world = world or getattr(cfg, "nproc", 1)
    compute = 2 if getattr(cfg, "bf16", True) and not _on_cpu(device) else 4
    state = state_parts(shape, shard, world, compute, generates=work.generation_tokens > 0)

    def parts(ck: bool) -> dict:
        grads = state["gradients"]
        out = {**state,
               "activations": work.passes * activation_bytes(shape, work.tokens, ck),
               # a chunk's logits, softmax and gradient; kept full-vocabulary logits: the student's
               # with their log-softmax, softmax and gradients, the teacher's with its log-softmax
               "logits": 4.0 * shape.vocab * (3 * min(work.logit_positions, LOGIT_CHUNK) + 6 * work.full_logits),
               "frozen models": sum(frozen_bytes(s, t, shard, world, compute) for s, t in work.frozen),
               "generation": 8.0 * shape.layers * shape.kv_dim * work.generation_tokens,
               "runtime": RUNTIME if _on_cpu(device) else 0.0}
        # AdamW's temporaries at the optimizer step, when the activations are gone
        out["optimizer step"] = max(0.0, grads - out["activations"] - out["logits"])
        return out

    off, on = parts(False), parts(True)
    kept = sum(state.values())
    if mode == "auto":
        ck = not work.checkpointing_blocked and (sum(off.values()) > limit or off["activations"] > kept)
    else:
        ck = mode == "on"
    return Plan(on if ck else off, ck, limit, work, shard, world)


def state_parts(shape: ModelShape, shard: str = "none", world: int = 1, compute: int = 4,
                generates: bool = False) -> dict:
    """Bytes one process keeps of the model's state under `--shard` over `world` processes
    (module docstring): weights, gradients, optimizer and, sharded, the gathered weights."""
    n = world if check_shard(shard) != "none" else 1
    grads = 4.0 * shape.trainable
    out = {"weights": shape.params * shape.bytes_per_param / n, "gradients": grads / n, "optimizer": 2 * grads / n}
    if shard != "none":
        block, root = shape.block_params, shape.root_params
        whole = shape.params if shard == "grad_op" else root + 2 * block
        if generates:  # sampling gathers every unit (train/shard.py `gathered`)
            whole = shape.params
        out["gathered"] = compute * whole + 4.0 * max(2 * block, root)
    return out


def _on_cpu(device) -> bool:
    return device is None or getattr(device, "type", str(device)) == "cpu"


def memory_limit(cfg, device=None) -> float:
    """Bytes this process may use (module docstring)."""
    if getattr(cfg, "memory_gb", 0):
        if cfg.memory_gb < 0:
            raise ValueError(f"--memory-gb must be >= 0, not {cfg.memory_gb}")
        return cfg.memory_gb * GB
    if not _on_cpu(device):
        import torch

        free, _ = torch.cuda.mem_get_info(device)
        return float(free + torch.cuda.memory_allocated(device))
    share = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return rss_bytes() + available_bytes() / share


def available_bytes() -> float:
    """Memory the machine (or this cgroup) can still give: the smaller of MemAvailable and the
    cgroup's room (memory.max - memory.current)."""
    import psutil

    avail = float(psutil.virtual_memory().available)
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            cap, used = open(limit_file).read().strip(), open(usage_file).read().strip()
        except OSError:
            continue
        if cap.isdigit() and int(cap) < 1 << 60:
            avail = min(avail, float(int(cap) - int(used)))
        break
    return max(avail, 0.0)


def rss_bytes() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss)


def peak_memory_gb(device=None) -> float:
    """This process's peak so far: resident memory on CPU, allocated device memory on a GPU."""
    if not _on_cpu(device):
        import torch

        return torch.cuda.max_memory_allocated(device) / GB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GB  # Linux: KiB

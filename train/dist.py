"""Data-parallel training on one machine: start torch.distributed from the torchrun
environment (nccl on CUDA with device cuda:LOCAL_RANK, gloo on CPU), reduce gradients and
step statistics across ranks, and launch `python -m train sft|grpo ...` under
`torch.distributed.run` (what `--nproc N` does).

    device = init_from_env()        # in each rank; (no process group without WORLD_SIZE)
    ...                             # Trainer calls reduce_grads / gather_all every step
    teardown()

    launch("sft", [sft_cfg, train_cfg], data_root, nproc=2)   # from the flow or the CLI

With `--shard full|grad_op` the ranks shard the model (train/shard.py) and FSDP reduces the
gradients itself (`scale_grads` only scales them); a single sharded process gets a one-rank
group (`init_from_env(one_rank=True)`).

The launcher uses a static rendezvous on 127.0.0.1 and a free port, streams the ranks'
output as it comes, and raises `LaunchFailed` with the failing rank's error if any rank
fails (torchrun then stops the others).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

import torch

from generators.llm.vllm_server import free_port
from storage.configcli import to_args

BUCKET_NUMEL = 1 << 24  # gradient elements per all_reduce (64 MiB of float32)
RANK_ERROR = "forgeplay rank"  # prefix of the line a failing rank prints (see rank_error_line)


class LaunchFailed(RuntimeError):
    """A rank of a `--nproc` run failed; the message holds its error."""


# ---- inside a rank ---------------------------------------------------------------------

def is_distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def init_from_env(one_rank: bool = False) -> torch.device:
    """Initialise the default process group from WORLD_SIZE/RANK/LOCAL_RANK/MASTER_* (set by
    torchrun) and return this rank's device. Without WORLD_SIZE: no process group (with
    `one_rank`, which sharding needs, a group of this process alone), cuda:0 or cpu."""
    cuda = torch.cuda.is_available()
    if "WORLD_SIZE" not in os.environ:
        device = torch.device("cuda", 0) if cuda else torch.device("cpu")
        if one_rank and not is_distributed():
            torch.distributed.init_process_group("nccl" if cuda else "gloo", store=torch.distributed.HashStore(),
                                                 rank=0, world_size=1, device_id=device if cuda else None)
        return device
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        if local >= torch.cuda.device_count():
            raise ValueError(f"local rank {local} but only {torch.cuda.device_count()} GPUs")
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if not is_distributed():
        torch.distributed.init_process_group("nccl" if cuda else "gloo")
    return device


def teardown() -> None:
    if is_distributed():
        torch.distributed.destroy_process_group()


def rank_error_line(exc: BaseException) -> str:
    rank = os.environ.get("RANK", "0")
    return f"{RANK_ERROR} {rank} failed: {type(exc).__name__}: {exc}"


def broadcast_params(model: torch.nn.Module) -> None:
    """Make every rank's parameters and buffers equal to rank 0's."""
    if not is_distributed():
        return
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            torch.distributed.broadcast(t.data, src=0)


def gather_all(obj: Any) -> list:
    """[obj of rank 0, obj of rank 1, ...] on every rank; [obj] without a process group."""
    if not is_distributed():
        return [obj]
    out: list = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(out, obj)
    return out


def gather_to_first(obj: Any) -> list | None:
    """[obj of rank 0, obj of rank 1, ...] on rank 0, None on the others; [obj] without a process group."""
    if not is_distributed():
        return [obj]
    first = torch.distributed.get_rank() == 0
    out: list | None = [None] * torch.distributed.get_world_size() if first else None
    torch.distributed.gather_object(obj, out, dst=0)
    return out


def from_first(obj: Any) -> Any:
    """Rank 0's `obj` on every rank (what the others pass is ignored); `obj` without a process group."""
    if not is_distributed():
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def reduce_grads(params: Sequence[torch.nn.Parameter], scale: float) -> None:
    """grad <- scale * (sum of grad over ranks), in flattened buckets of at most BUCKET_NUMEL
    elements (one all_reduce per bucket). A parameter without a gradient counts as zeros."""
    params = [p for p in params if p.requires_grad]
    if not is_distributed():
        for p in params:
            if p.grad is not None:
                p.grad.mul_(scale)
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    bucket: list[torch.Tensor] = []
    for p in params:
        g = p.grad
        if bucket and (g.dtype != bucket[0].dtype or sum(x.numel() for x in bucket) + g.numel() > BUCKET_NUMEL):
            _reduce_bucket(bucket, scale)
            bucket = []
        bucket.append(g)
    if bucket:
        _reduce_bucket(bucket, scale)


def scale_grads(params: Sequence[torch.nn.Parameter], scale: float) -> None:
    """grad <- scale * grad (sharded training: FSDP already summed the gradients over ranks)."""
    for p in params:
        if p.grad is not None:
            p.grad.mul_(scale)


def _reduce_bucket(grads: list[torch.Tensor], scale: float) -> None:
    flat = torch.cat([g.reshape(-1) for g in grads])
    torch.distributed.all_reduce(flat)
    flat.mul_(scale)
    for g, part in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(part.view_as(g))


# ---- the launcher ------------------------------------------------------------------------

def check_nproc(nproc: int) -> None:
    if nproc < 1:
        raise ValueError(f"--nproc must be >= 1, not {nproc}")
    if torch.cuda.is_available() and nproc > torch.cuda.device_count():
        raise ValueError(f"--nproc {nproc} but this machine has {torch.cuda.device_count()} GPUs")


def command(kind: str, configs: Sequence, data_root: str | Path | None, nproc: int,
            module: str = "train") -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", module, "--", kind]
    # "--": the stage's options are the script's, even those that abbreviate torch.distributed.run's
    # own (--run); under torchrun WORLD_SIZE is the process count, so --nproc is left out
    cmd += to_args(*configs, skip=("nproc",))
    if data_root is not None:
        cmd += ["--data-root", str(data_root)]
    return cmd


def launch(kind: str, configs: Sequence, data_root: str | Path | None, nproc: int, module: str = "train") -> None:
    """Run `python -m MODULE KIND` (the kind's StageKind.module) in `nproc` processes on this
    machine and wait; the ranks' output streams to stderr. Raises LaunchFailed when a rank fails."""
    check_nproc(nproc)
    env = dict(os.environ)
    if not torch.cuda.is_available() and Path("/sys/class/net/lo").exists():
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # all ranks are on this machine
    proc = subprocess.Popen(command(kind, configs, data_root, nproc, module), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    tail = ""
    try:
        while chunk := os.read(proc.stdout.fileno(), 65536):
            text = chunk.decode(errors="replace")
            sys.stderr.write(text)
            sys.stderr.flush()
            tail = (tail + text)[-65536:]
        code = proc.wait()
    except BaseException:  # e.g. Ctrl-C: stop the ranks too
        proc.terminate()
        proc.wait()
        raise
    finally:
        proc.stdout.close()
    if code != 0:
        raise LaunchFailed(f"{nproc}-process training failed (exit code {code}): {failure_reason(tail)}")


def failure_reason(output: str) -> str:
    """The failing rank's own error line, else the last exception line of the output."""
    lines = [ln.strip() for ln in re.split(r"[\r\n]+", output) if ln.strip()]
    for ln in lines:
        if ln.startswith(RANK_ERROR):
            return ln[len("forgeplay "):]
    errors = [ln for ln in lines if re.match(r"^[\w.]*(Error|Exception)\b", ln)]
    return errors[-1] if errors else (lines[-1] if lines else "no output")

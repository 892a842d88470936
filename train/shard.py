"""Sharded training with PyTorch's FSDP2 (`torch.distributed.fsdp.fully_shard`): each rank
keeps 1/N of the parameters, gradients and AdamW state (`--shard full|grad_op`; `none`, the
default, keeps a whole copy on every rank and averages gradients, train/dist.py).

    shard_model(model, "full", device, bf16=True)   # every decoder block, then the whole model
    shard_from_first(model, "full")                 # the same, with rank 0's weights (the Trainer's)
    with gathered(model):                           # whole weights on every rank, no collectives:
        rollout(...)                                #   ranks may sample different lengths
    in_forward(model, lambda: model.base_model(**inputs).last_hidden_state)   # see below

- Units: each decoder block is one FSDP unit and the model itself the root unit (embeddings,
  final norm, output layer; a tied output layer stays tied). `full` gathers a block's weights
  for its forward and frees them after it, and again for its backward (ZeRO-3); `grad_op`
  (`reshard_after_forward=False`) keeps the gathered weights from the forward to the backward
  (fewer all-gathers, whole weights held for the pass: gradients and optimizer state stay
  sharded, as ZeRO-2).
- Gradients are reduce-scattered as a plain sum (`set_gradient_divide_factor(1.0)` with
  sum-only collectives, which gloo needs); the trainer then scales by 1 / the global loss
  weight, as it does for the unsharded all_reduce, so a sharded step equals an unsharded one.
- Mixed precision on a GPU with `--bf16` (the default): blocks compute in bf16 and reduce
  gradients in float32 (`MixedPrecisionPolicy`); the sharded master weights and AdamW stay
  float32. On CPU everything stays float32.
- A pass that calls the decoder and the output layer separately (the chunked log-probabilities,
  train/packing.py) runs inside `in_forward`: one call through the root unit's hooks
  (`register_fsdp_forward_method`), so the root's weights are gathered for it and its
  gradients reduced after the backward.
- Sampling (`gathered`) unshards every unit and keeps them whole until the block ends: a
  generation step then needs no all-gather, so ranks sampling different lengths never wait on
  each other. It holds the whole weights in the compute dtype for that time (the memory plan
  counts it, train/memory.py).
- Frozen models beside the policy (GRPO's and the examiner's KL reference, the student's EMA
  teacher) are sharded into the same units (`frozen=True`: no gradients, each unit resharded
  after its forward), so a rank keeps 1/N of them too; an EMA teacher then moves its own slice
  towards the student's slice (selfplay/teacher.py) and is gathered whole to be saved.
- Loading (`shard_from_first`): under torchrun rank 0 alone reads the weights, into host
  memory; the other ranks build the model on the meta device (train/stages.py `load_model`).
  Every rank shards its (meta) model, allocates its slices on its device and receives them
  from rank 0 (`set_model_state_dict` with `broadcast_from_rank0`, a tensor at a time), then
  rank 0's buffers: no rank ever holds the whole model on its device.
- The FSDP units need a process group: a single process with `--shard full|grad_op` gets a
  one-rank group (`dist.init_from_env`).
"""

from __future__ import annotations

import os
import types
from contextlib import contextmanager
from typing import Callable

import torch

from train.memory import SHARDS, check_shard  # noqa: F401  (re-exported; memory.py imports no torch)

_CALL = "forgeplay_in_forward"  # the method registered on a sharded model (in_forward)


def is_sharded(model) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def units(model) -> list:
    """The model's FSDP units (root last); [] for a model that is not sharded."""
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)][::-1] if is_sharded(model) else []


def decoder_blocks(model) -> torch.nn.ModuleList:
    """The model's list of decoder blocks (the ModuleList of `num_hidden_layers` modules)."""
    n = getattr(getattr(model, "config", None), "num_hidden_layers", -1)
    blocks = next((m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n), None)
    if blocks is None:
        raise ValueError("--shard: cannot find the model's list of decoder blocks")
    return blocks


def shard_model(model, mode: str, device, bf16: bool = True, frozen: bool = False) -> bool:
    """Shard `model` in place across the default process group (module docstring); False
    (nothing done) for `none`. `frozen`: a model beside the policy that only runs forward (a
    reference, a teacher): the same units, each resharded after its forward."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method

    if check_shard(mode) == "none":
        return False
    kw = {}
    if bf16 and torch.device(device).type == "cuda":
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    reshard = mode == "full" or frozen
    for block in decoder_blocks(model):
        fully_shard(block, reshard_after_forward=reshard, **kw)
        block._forgeplay_reshard = reshard  # what `gathered` restores
    fully_shard(model, **kw)
    model._forgeplay_reshard = False  # FSDP keeps the root's weights from its forward to its backward
    for unit in units(model) if not frozen else ():
        unit.set_gradient_divide_factor(1.0)  # a sum: the trainer divides by the global loss weight
        unit.set_force_sum_reduction_for_comms(True)  # gloo has no pre-multiplied sum
    setattr(model, _CALL, types.MethodType(lambda self, fn: fn(), model))
    register_fsdp_forward_method(model, _CALL)
    return True


def loads_whole(mode: str) -> bool | None:
    """Sharded over several ranks under torchrun: True on rank 0, which reads the weights, False
    on the others, which build the model on the meta device (train/stages.py `load_model`);
    None otherwise (every process loads the model)."""
    if check_shard(mode) == "none" or int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return None
    return int(os.environ.get("RANK", "0")) == 0


def this_device() -> torch.device:
    """The device this rank computes on: its current GPU, else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def shard_from_first(model, mode: str, bf16: bool = True, frozen: bool = False) -> bool:
    """`shard_model` on this rank's device, then each rank's slice of rank 0's weights and rank
    0's buffers (module docstring); what the other ranks loaded is not read: a model on the meta
    device will do. Every rank calls it. False (nothing done) for `none`."""
    import torch.distributed as tdist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    if check_shard(mode) == "none":
        return False
    device, first = this_device(), tdist.get_rank() == 0
    weights = model.state_dict() if first else {}  # rank 0's tensors stay alive here
    buffers = dict(model.named_buffers()) if first else {}  # also those a state dict leaves out (rotary tables)
    ties = _ties(model)
    model.to("meta")  # nothing whole is moved to the device: FSDP would move it before it shards
    _tie(model, ties)  # a move makes a new parameter of each place a tied one was
    shard_model(model, mode, device, bf16, frozen)
    model.to_empty(device=device)
    _tie(model, ties)
    set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if first:
                buf.copy_(buffers[name])
            tdist.broadcast(buf, src=0)
    return True


def _ties(model) -> dict[str, str]:
    """Each further place of a parameter shared by several modules (a tied output layer) -> its first."""
    first: dict[int, str] = {}
    ties = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            ties[name] = first[id(p)]
        else:
            first[id(p)] = name
    return ties


def _tie(model, ties: dict[str, str]) -> None:
    """Make each further place of a tied parameter hold its first place's parameter again."""
    for name, first in ties.items():
        prefix, _, attr = name.rpartition(".")
        setattr(model.get_submodule(prefix), attr, model.get_parameter(first))


def in_forward(model, fn: Callable[[], torch.Tensor]):
    """`fn()`; on a sharded model inside one forward call of its root unit (module docstring)."""
    if not is_sharded(model) or getattr(model, "_forgeplay_inside", False):
        return fn()
    model._forgeplay_inside = True
    try:
        return getattr(model, _CALL)(fn)
    finally:
        model._forgeplay_inside = False


@contextmanager
def gathered(model):
    """Whole weights on every rank until the block ends, with no collective inside it (module
    docstring); nothing for a model that is not sharded. Every rank must enter it."""
    parts = units(model)
    if not parts:
        yield model
        return
    for unit in parts:
        unit.set_reshard_after_forward(False, recurse=False)
        unit.unshard()
    model._forgeplay_inside = True  # whole weights: the decoder may be called directly
    try:
        yield model
    finally:
        model._forgeplay_inside = False
        for unit in parts:
            unit.reshard()
            unit.set_reshard_after_forward(unit._forgeplay_reshard, recurse=False)


def full_state_dict(model) -> dict:
    """The whole state dict on CPU: a collective on a sharded model (every rank calls it; rank 0
    gets the tensors, the others an empty dict). A model that is not sharded: its own, on CPU."""
    if not is_sharded(model):
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_full_state_dict(model, state: dict) -> None:
    """Load a whole state dict (every rank holds it) into `model`; a sharded model keeps each
    rank's slice of it."""
    if not is_sharded(model):
        model.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's slice of a DTensor (a view), any other tensor as it is."""
    return t.to_local() if hasattr(t, "to_local") else t


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's whole value (a collective), any other tensor as it is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t

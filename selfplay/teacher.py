"""The teacher: an exponential moving average (EMA) of the student's weights.

The teacher starts as a frozen copy of the student (or of `start`, a teacher saved by an
earlier iteration; eval mode, no gradients) and after each
student step moves towards it: p_t <- (1 - tau) * p_t + tau * p_s for every parameter and
every floating-point buffer (integer buffers such as counters are left as they are).
Parameters are matched by name; a weight shared by two modules (an LM head tied to the
embedding) is one parameter, updated once, and stays shared in the teacher.

    teacher = EMATeacher(student, tau=0.05)
    ... optimizer.step() on the student ...
    teacher.update(student)
    logits = teacher(input_ids)            # the frozen module's forward
    state = teacher.state_dict()           # its weights and update count: a checkpoint's extra
    teacher.load_state_dict(state)         # (train/checkpoint.py), so a resumed stage goes on from them
"""

from __future__ import annotations

import torch

from train.objective import frozen_copy
from train.shard import full_state_dict, full_tensor, is_sharded, load_full_state_dict, local, units


class EMATeacher:
    """A frozen copy of a student updated by EMA; `module` is the copy, `updates` counts updates."""

    def __init__(self, student: torch.nn.Module, tau: float = 0.05, start: torch.nn.Module | None = None) -> None:
        if not 0.0 <= tau <= 1.0:
            raise ValueError(f"tau must be in [0, 1], got {tau}")
        self.tau = tau
        self.module = frozen_copy(student if start is None else start)  # `start`: a teacher kept from before
        self.updates = 0
        self._pairs(student)  # the same tensors, or a readable error now

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _pairs(self, student: torch.nn.Module):
        mine = dict(self.module.named_parameters()) | dict(self.module.named_buffers())
        theirs = dict(student.named_parameters()) | dict(student.named_buffers())
        if mine.keys() != theirs.keys():
            raise ValueError(f"student and teacher differ in their tensors: {sorted(mine.keys() ^ theirs.keys())[:5]}")
        return [(mine[n], theirs[n]) for n in mine if mine[n].is_floating_point()]

    @torch.no_grad()
    def update(self, student: torch.nn.Module) -> None:
        """p_t <- (1 - tau) * p_t + tau * p_s for every floating parameter and buffer. Teacher and
        student sharded alike (train/shard.py): each rank moves its own slice; a sharded student
        beside a whole teacher: its parameters gathered whole (every rank calls)."""
        both = is_sharded(self.module) and is_sharded(student)
        for unit in units(self.module):  # FSDP keeps a root unit whole after a forward without backward
            unit.reshard()
        for t, s in self._pairs(student):
            s = local(s.detach()) if both else full_tensor(s.detach())
            local(t).lerp_(s.to(device=t.device, dtype=t.dtype), self.tau)
        self.updates += 1

    def state_dict(self) -> dict:
        """The moving average's weights and its update count (what a checkpoint keeps); a sharded
        teacher's weights are gathered to rank 0 (a collective: every rank calls)."""
        return {"module": {k: v.clone() for k, v in full_state_dict(self.module).items()},
                "updates": self.updates, "tau": self.tau}

    def load_state_dict(self, state: dict) -> None:
        """Go on from a saved average: its weights and update count."""
        load_full_state_dict(self.module, state["module"])
        self.updates = int(state["updates"])

    def save(self, out, tokenizer, rank: int = 0) -> None:
        """The teacher as a model folder (a collective when sharded: every rank calls; rank 0 writes)."""
        weights = full_state_dict(self.module)
        if rank == 0:
            self.module.save_pretrained(out, state_dict=weights)
            tokenizer.save_pretrained(out)

"""The EMA teacher: after updates with students of known weights it equals the closed-form
EMA of the weight history, for a stack of layers (with float and integer buffers) and for a
module whose head is tied to its embedding; it has no gradients and leaves the student alone."""

import pytest
import torch
from torch import nn

from selfplay.teacher import EMATeacher

TAU = 0.1


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(5, 3)
        self.head = nn.Linear(3, 5)  # its bias is its own, its weight the embedding
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(self.emb(ids))


def stack():
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))


def set_weights(model: nn.Module, step: int) -> dict:
    """Give every float tensor of `model` known values for this step; return them by name."""
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if t.is_floating_point():
                t.copy_(torch.arange(t.numel(), dtype=t.dtype).reshape(t.shape) * (step + 1) - 2.0 * step)
    return {n: t.detach().clone() for n, t in list(model.named_parameters()) + list(model.named_buffers())}


def closed_form(history: list[dict], name: str) -> torch.Tensor:
    """(1-tau)^m w_0 + sum_i tau (1-tau)^(m-i) w_i after m updates."""
    m = len(history) - 1
    out = (1 - TAU) ** m * history[0][name]
    for i in range(1, m + 1):
        out = out + TAU * (1 - TAU) ** (m - i) * history[i][name]
    return out


@pytest.mark.parametrize("make", [stack, Tied])
def test_teacher_is_the_closed_form_ema_of_the_history(make):
    torch.manual_seed(0)
    student = make()
    history = [set_weights(student, 0)]
    teacher = EMATeacher(student, tau=TAU)
    for step in (1, 2, 3):
        history.append(set_weights(student, step))
        teacher.update(student)
    assert teacher.updates == 3
    tensors = dict(teacher.module.named_parameters()) | dict(teacher.module.named_buffers())
    floats = [n for n, t in tensors.items() if t.is_floating_point()]
    assert len(floats) >= 2
    for name in floats:
        torch.testing.assert_close(tensors[name], closed_form(history, name), rtol=1e-6, atol=1e-5)
        assert not torch.equal(tensors[name], history[-1][name])  # really an average, not a copy
    for name, t in student.named_parameters():  # the student keeps its own last weights
        assert torch.equal(t, history[-1][name]) and t.requires_grad


def test_teacher_is_frozen_and_in_eval_mode():
    student = stack().train()
    teacher = EMATeacher(student)
    teacher.update(student)
    assert not teacher.module.training and student.training
    assert all(not p.requires_grad for p in teacher.module.parameters())
    assert all(p.requires_grad for p in student.parameters())
    out = teacher(torch.ones(2, 3))
    assert out.shape == (2, 2) and out.grad_fn is None


def test_tied_head_stays_tied_and_integer_buffers_stay():
    student = Tied()
    teacher = EMATeacher(student, tau=0.5)
    assert teacher.module.head.weight is teacher.module.emb.weight
    with torch.no_grad():
        student.emb.weight.fill_(1.0)
    before = teacher.module.emb.weight.detach().clone()
    teacher.update(student)
    assert teacher.module.head.weight is teacher.module.emb.weight
    torch.testing.assert_close(teacher.module.emb.weight, 0.5 * before + 0.5)  # updated once, not twice

    bn = stack()
    t = EMATeacher(bn, tau=0.5)
    bn[1].num_batches_tracked.fill_(7)
    t.update(bn)
    assert t.module[1].num_batches_tracked.item() == 0


def test_mismatched_student_raises():
    teacher = EMATeacher(stack())
    with pytest.raises(ValueError):
        teacher.update(Tied())

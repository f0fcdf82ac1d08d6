"""Learning-rate schedules (tilepy.models.optim.lr_scheduler): closed forms, composition,
state round trips, and torch's values when torch is installed."""

import math

import numpy as np
import pytest

from tilepy.models import Parameter
from tilepy.models.optim import SGD, lr_scheduler
from tilepy.models.training.errors import OptimizerError


def _opt(lr=1.0):
    return SGD([{"params": [Parameter(np.zeros(3, np.float32))]},
                {"params": [Parameter(np.zeros(2, np.float32))], "lr": lr / 10}], lr=lr)


def _trace(sched, n):
    out = [sched.get_last_lr()[0]]
    for _ in range(n):
        sched.step()
        out.append(sched.get_last_lr()[0])
    return out


def test_step_lr():
    assert _trace(lr_scheduler.StepLR(_opt(), step_size=2, gamma=0.5), 5) == \
        [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]


def test_linear_warmup_then_constant():
    got = _trace(lr_scheduler.LinearLR(_opt(), start_factor=0.25, total_iters=3), 5)
    assert got == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0], abs=1e-15)


def test_cosine_annealing_closed_form_per_group():
    opt = _opt(2.0)
    sched = lr_scheduler.CosineAnnealingLR(opt, T_max=4, eta_min=0.1)
    for t in range(1, 6):
        sched.step()
        for g, base in zip(opt.param_groups, (2.0, 0.2)):
            assert g["lr"] == 0.1 + (base - 0.1) * (1 + math.cos(math.pi * t / 4)) / 2


def test_warmup_cosine_composition():
    opt = _opt()
    got = _trace(lr_scheduler.warmup_cosine(opt, warmup_steps=2, total_steps=6,
                                            start_factor=0.5), 6)
    cos = [(1 + math.cos(math.pi * t / 4)) / 2 for t in range(5)]
    assert got == pytest.approx([0.5, 0.75] + cos, abs=1e-15)


def test_state_dict_resumes_the_same_values():
    a = lr_scheduler.warmup_cosine(_opt(), 3, 10)
    _trace(a, 4)
    b_opt = _opt()
    b = lr_scheduler.warmup_cosine(b_opt, 3, 10)
    b.load_state_dict(a.state_dict())
    assert _trace(a, 5) == _trace(b, 5)
    assert b_opt.param_groups[1]["lr"] == a.optimizer.param_groups[1]["lr"]


def test_bad_milestones_are_refused():
    opt = _opt()
    s = [lr_scheduler.StepLR(opt, 1), lr_scheduler.StepLR(opt, 1)]
    with pytest.raises(OptimizerError, match=r"1 increasing milestone\(s\) for 2 schedulers"):
        lr_scheduler.SequentialLR(opt, s, [])
    with pytest.raises(OptimizerError, match="T_max must be > 0; got 0"):
        lr_scheduler.CosineAnnealingLR(opt, 0)


def test_matches_torch_when_installed():
    torch = pytest.importorskip("torch")
    tp = torch.nn.Parameter(torch.zeros(2))
    for ours, theirs in [
        (lambda o: lr_scheduler.StepLR(o, 3, 0.3), lambda o: torch.optim.lr_scheduler.StepLR(
            o, 3, 0.3)),
        (lambda o: lr_scheduler.CosineAnnealingLR(o, 7, 0.01),
         lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 7, 0.01)),
        (lambda o: lr_scheduler.LinearLR(o, 0.1, 1.0, 4),
         lambda o: torch.optim.lr_scheduler.LinearLR(o, 0.1, 1.0, 4))]:
        topt = torch.optim.SGD([tp], lr=0.5)
        tsched, sched = theirs(topt), ours(_opt(0.5))
        for _ in range(10):
            topt.step()
            tsched.step()
            sched.step()
            assert sched.get_last_lr()[0] == pytest.approx(tsched.get_last_lr()[0], rel=1e-12)

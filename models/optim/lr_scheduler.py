"""Learning-rate schedules with torch.optim.lr_scheduler's names and closed forms: step
decay, linear warmup, cosine annealing, a lambda, and SequentialLR to chain them.

A schedule sets each group's 'lr' from the group's initial lr and the step count alone
(no chained products), so a schedule restored from state_dict continues with the same bits.
"""

from __future__ import annotations

import bisect
import math

from tilepy.models.kernels import record as hooks
from tilepy.models.training.errors import OptimizerError, user_loc


class LRScheduler:
    """Base: `step()` advances one step and sets every group's lr; `get_last_lr()`."""

    def __init__(self, optimizer, last_epoch: int = -1):
        self.optimizer = optimizer
        for g in optimizer.param_groups:
            g.setdefault("initial_lr", g["lr"])
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def lr_at(self, base: float, t: int) -> float:
        """The learning rate after t steps of a group whose initial lr is `base`."""
        raise NotImplementedError

    @hooks.host_op
    def step(self) -> None:
        self.last_epoch += 1
        for g, base in zip(self.optimizer.param_groups, self.base_lrs):
            g["lr"] = self.lr_at(base, self.last_epoch)
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict:
        return {"last_epoch": self.last_epoch, "base_lrs": list(self.base_lrs)}

    def load_state_dict(self, state: dict) -> None:
        self.last_epoch = int(state["last_epoch"]) - 1
        self.base_lrs = [float(b) for b in state["base_lrs"]]
        self.step()


def _positive(name: str, value) -> None:
    if not value > 0:
        raise OptimizerError(f"{name} must be > 0; got {value!r}", user_loc())


class StepLR(LRScheduler):
    """lr = base * gamma ** (t // step_size)."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        _positive("step_size", step_size)
        self.step_size, self.gamma = int(step_size), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base: float, t: int) -> float:
        return base * self.gamma ** (t // self.step_size)


class LinearLR(LRScheduler):
    """Linear warmup: the factor goes from start_factor to end_factor over total_iters
    steps, then stays."""

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        if not (0 < start_factor <= 1 and 0 <= end_factor <= 1):
            raise OptimizerError("LinearLR needs 0 < start_factor <= 1 and 0 <= end_factor "
                                 f"<= 1; got {start_factor}, {end_factor}", user_loc())
        _positive("total_iters", total_iters)
        self.start, self.end, self.total = start_factor, end_factor, int(total_iters)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base: float, t: int) -> float:
        return base * (self.start + (self.end - self.start) * min(t, self.total) / self.total)


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base - eta_min) * (1 + cos(pi * t / T_max)) / 2 (torch's closed
    form; it rises again after T_max)."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        _positive("T_max", T_max)
        self.T_max, self.eta_min = int(T_max), eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base: float, t: int) -> float:
        return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * t / self.T_max)) / 2


class LambdaLR(LRScheduler):
    """lr = base * lr_lambda(t) (not saved by state_dict: the function is code)."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        self.lr_lambda = lr_lambda
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base: float, t: int) -> float:
        return base * self.lr_lambda(t)


class SequentialLR(LRScheduler):
    """schedulers[i] runs from milestones[i-1] on, counting its steps from there."""

    def __init__(self, optimizer, schedulers: list, milestones: list[int],
                 last_epoch: int = -1):
        if len(milestones) != len(schedulers) - 1 or list(milestones) != sorted(milestones):
            raise OptimizerError(
                f"SequentialLR needs {len(schedulers) - 1} increasing milestone(s) for "
                f"{len(schedulers)} schedulers; got {list(milestones)}", user_loc())
        for s in schedulers:
            if s.optimizer is not optimizer:
                raise OptimizerError("SequentialLR's schedulers must drive its optimizer",
                                     user_loc())
        self.schedulers, self.milestones = list(schedulers), list(milestones)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base: float, t: int) -> float:
        i = bisect.bisect_right(self.milestones, t)
        start = self.milestones[i - 1] if i else 0
        return self.schedulers[i].lr_at(base, t - start)


def warmup_cosine(optimizer, warmup_steps: int, total_steps: int, eta_min: float = 0.0,
                  start_factor: float = 1e-3) -> SequentialLR:
    """Linear warmup for warmup_steps, then cosine annealing to eta_min at total_steps."""
    warm = LinearLR(optimizer, start_factor, 1.0, warmup_steps)
    cos = CosineAnnealingLR(optimizer, max(total_steps - warmup_steps, 1), eta_min)
    return SequentialLR(optimizer, [warm, cos], [warmup_steps])

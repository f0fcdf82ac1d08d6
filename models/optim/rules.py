"""SGD, Adam and AdamW: torch.optim's arguments and update formulas, each step one fused
tile kernel launch per dtype (models/optim/kernels.py).

Each class checks its hyper-parameters, computes one row of per-parameter coefficients
(bias corrections in float64, rounded once) and launches its kernel.
"""

from __future__ import annotations

import math

import numpy as np

from tilepy.models.kops import dtype_name
from tilepy.models.kops import kernel as cached
from tilepy.models.optim.kernels import ADAM_COLS, SGD_COLS, adam_kernel, sgd_kernel
from tilepy.models.optim.optimizer import Optimizer
from tilepy.models.training.errors import OptimizerError, user_loc


def _need(ok: bool, what: str, got) -> None:
    if not ok:
        raise OptimizerError(f"{what}; got {got!r}", user_loc())


class SGD(Optimizer):
    """Stochastic gradient descent with L2 weight decay, momentum (dampening) and Nesterov
    momentum, as torch.optim.SGD: the first step's momentum buffer is the gradient."""

    columns = SGD_COLS

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
                 *, maximize: bool = False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize))

    def _check_group(self, g: dict) -> None:
        super()._check_group(g)
        _need(g["momentum"] >= 0, "momentum must be >= 0", g["momentum"])
        _need(g["weight_decay"] >= 0, "weight_decay must be >= 0", g["weight_decay"])
        if g["nesterov"] and (g["momentum"] <= 0 or g["dampening"] != 0):
            raise OptimizerError(
                "Nesterov momentum needs momentum > 0 and dampening = 0; got momentum="
                f"{g['momentum']}, dampening={g['dampening']}", user_loc())

    def _row(self, g: dict, st: dict) -> dict:
        first = g["momentum"] != 0 and "momentum_buffer" not in st
        return dict(neg_lr=-g["lr"], weight_decay=g["weight_decay"], momentum=g["momentum"],
                    one_minus_dampening=1.0 - g["dampening"], first=float(first),
                    nesterov=float(g["nesterov"]), maximize=float(g["maximize"]))

    def _prepare(self, g: dict, st: dict, bucket, i: int) -> None:
        if g["momentum"] != 0:
            self._state_view(bucket, i, "momentum_buffer")

    def _launch(self, bucket, blocks: np.ndarray, hp: np.ndarray) -> None:
        has_momentum = "momentum_buffer" in bucket.state
        buf = bucket.state["momentum_buffer"] if has_momentum else bucket.grad
        self._run((id(bucket), has_momentum), lambda: cached(
            sgd_kernel, block=bucket.block, dtype=dtype_name(bucket.dtype),
            momentum=has_momentum), bucket.data, bucket.grad, buf, blocks, hp)


class Adam(Optimizer):
    """Adam (L2 weight decay added to the gradient), as torch.optim.Adam; AdamW decays the
    weights instead. Bias corrections use each parameter's own step count."""

    columns = ADAM_COLS
    decoupled = False
    row_reads_step = True  # the bias corrections

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, *, maximize: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, maximize=maximize))

    def _check_group(self, g: dict) -> None:
        super()._check_group(g)
        b1, b2 = g["betas"]
        _need(0 <= b1 < 1 and 0 <= b2 < 1, "betas must lie in [0, 1)", g["betas"])
        _need(g["eps"] >= 0, "eps must be >= 0", g["eps"])
        _need(g["weight_decay"] >= 0, "weight_decay must be >= 0", g["weight_decay"])

    def _row(self, g: dict, st: dict) -> dict:
        b1, b2 = g["betas"]
        t = st["step"]
        lr, wd = g["lr"], g["weight_decay"]
        return dict(neg_step_size=-(lr / (1.0 - b1 ** t)),
                    bias_correction2_sqrt=math.sqrt(1.0 - b2 ** t),
                    one_minus_beta1=1.0 - b1, beta2=b2, one_minus_beta2=1.0 - b2,
                    eps=g["eps"], weight_decay=0.0 if self.decoupled else wd,
                    decay=1.0 - lr * wd if self.decoupled else 1.0,
                    maximize=float(g["maximize"]))

    def _prepare(self, g: dict, st: dict, bucket, i: int) -> None:
        self._state_view(bucket, i, "exp_avg")
        self._state_view(bucket, i, "exp_avg_sq")

    def _launch(self, bucket, blocks: np.ndarray, hp: np.ndarray) -> None:
        self._run((id(bucket),), lambda: cached(adam_kernel, block=bucket.block,
                                                dtype=dtype_name(bucket.dtype)),
                  bucket.data, bucket.grad, bucket.state["exp_avg"], bucket.state["exp_avg_sq"],
                  blocks, hp)


class AdamW(Adam):
    """Adam with decoupled weight decay (p *= 1 - lr * weight_decay before the Adam update),
    as torch.optim.AdamW (weight_decay defaults to 0.01)."""

    decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01, *, maximize: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, maximize=maximize)

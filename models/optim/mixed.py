"""Mixed-precision training on the optimiser side: float32 master weights for a model whose
parameters are stored in a narrower format (a precision policy's storage: bfloat16,
float16), with dynamic loss scaling from tilepy.precision.

A step packs the (scaled) gradients into the masters' flat buffer, finds inf/NaN and the
global norm with one reduction launch, skips the step on overflow (the scaler backs off),
else runs the wrapped optimiser's kernel with unscaling and clipping folded into its
gradient factor, then rounds the masters into the model's parameters (one cast launch).
"""

from __future__ import annotations

import math

import numpy as np

from tilepy.models.kernels import record as hooks
from tilepy.models.optim.flat import FlatBucket
from tilepy.models.optim.kernels import cast_kernel, sumsq_kernel
from tilepy.models.tensor import Parameter
from tilepy.models.training.errors import OptimizerError, user_loc
from tilepy.precision.policy import PRESETS, Policy
from tilepy.precision.scaling import DynamicLossScaler

STORAGE = ("float32", "bfloat16", "float16")


def _storage(policy) -> str:
    pol = PRESETS.get(policy) if isinstance(policy, str) else policy
    if not isinstance(pol, Policy):
        raise OptimizerError(f"unknown precision policy {policy!r}; expected one of "
                             f"{', '.join(PRESETS)} or a Policy", user_loc())
    if pol.storage not in STORAGE:
        raise OptimizerError(
            f"master weights keep copies in {', '.join(STORAGE)}; the policy stores "
            f"{pol.storage}", user_loc(),
            hint="fp8 weights are quantised per gemm with DelayedScaling; keep their "
                 "stored copies in bfloat16")
    return pol.storage


class MixedPrecision:
    """`MixedPrecision(model.parameters(), AdamW, lr=1e-3, policy="bf16")`: the model's
    parameters become `policy`'s storage dtype; the optimiser updates float32 masters."""

    def __init__(self, params, optimizer_cls, *, policy="bf16", loss_scaler=None,
                 **optimizer_kwargs):
        import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy)

        self.dtype = np.dtype(_storage(policy))
        self.params = list(params)
        self.masters = [Parameter(np.asarray(p.data, np.float32).copy()) for p in self.params]
        for p in self.params:
            p.data = np.asarray(p.data).astype(self.dtype)
        self.optimizer = optimizer_cls(self.masters, **optimizer_kwargs)
        self.scaler = loss_scaler if loss_scaler is not None else DynamicLossScaler()
        self.copies = FlatBucket(self.params, self.optimizer.block)
        self.launches = 0  # reduction and cast launches (the optimiser counts its own)
        self.last_norm = math.nan

    @property
    def param_groups(self) -> list:
        return self.optimizer.param_groups

    def scale_loss(self, loss):
        """loss * scale: backpropagate this so small gradients survive the narrow format."""
        if self.scaler.enabled:
            hooks.refuse("a dynamic loss scale (changed on the host when a gradient "
                         "overflows)", "capture the step with the loss scaler off, or run "
                         "it without capture")
        return self.scaler.scale_loss(loss)

    @hooks.host_op
    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params + self.masters:
            p.grad = None

    @hooks.host_op
    def step(self, closure=None, clip_grad_norm: float | None = None) -> bool:
        """Apply one update unless a gradient is inf/NaN (then skip it and back off the
        scale). Returns whether the step was applied."""
        if closure is not None:
            closure()
        self._sync()
        for p, m in zip(self.params, self.masters):
            m.grad = p.grad
        plan = self.optimizer._gather()
        scale = self.scaler.scale
        total = self._sumsq(plan)
        found_inf = not math.isfinite(total)
        if found_inf and not self.scaler.enabled:
            raise OptimizerError("a gradient holds inf or NaN and loss scaling is off",
                                 user_loc(), hint="enable the DynamicLossScaler, lower the "
                                                  "learning rate or clip gradients")
        if not self.scaler.update(found_inf):
            self.last_norm = math.inf
            return False
        self.last_norm = math.sqrt(total) / scale
        coef = 1.0
        if clip_grad_norm is not None:
            coef = min(1.0, clip_grad_norm / (self.last_norm + 1e-6))
        self.optimizer.grad_scale = (1.0 / scale) * coef
        try:
            self.optimizer._update(plan)
        finally:
            self.optimizer.grad_scale = 1.0
        self._cast([i for _, active in plan for i in active])
        return True

    def _sync(self) -> None:
        """Parameters whose .data the model replaced (load_state_dict) reset their masters."""
        for i, p in enumerate(self.params):
            if p.data is not self.copies.views[i]:
                self.masters[i].data[...] = np.asarray(p.data, np.float32)
        self.copies.sync_data()

    def _sumsq(self, plan: list) -> float:
        """The sum of squares of every gathered gradient (inf/NaN if any is): one launch."""
        parts = []
        for bucket, active in plan:
            starts = np.ascontiguousarray(bucket.blocks(active, active)[:, 0])
            kernel = sumsq_kernel(block=bucket.block, dtype=str(bucket.dtype))
            parts.extend(kernel(bucket.grad, starts).tolist())
            self.launches += 1
        return math.fsum(parts) if all(map(math.isfinite, parts)) else math.inf

    def _cast(self, active: list[int]) -> None:
        """Round the updated masters into the model's parameters: one launch."""
        (bucket,) = self.optimizer._buckets  # the masters, float32, in the params' order
        starts = np.ascontiguousarray(bucket.blocks(active, active)[:, 0])
        kernel = cast_kernel(block=bucket.block, src="float32", dst=str(self.dtype))
        kernel(bucket.data, self.copies.data, starts)
        self.launches += 1

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict(),
                "masters": [m.data.copy() for m in self.masters]}

    def load_state_dict(self, state: dict) -> None:
        masters = state["masters"]
        if [np.shape(m) for m in masters] != [m.shape for m in self.masters]:
            raise OptimizerError("mixed-precision state does not fit: its master weights "
                                 f"have shapes {[np.shape(m) for m in masters]}, this model's "
                                 f"{[m.shape for m in self.masters]}", user_loc(),
                                 hint="load the state saved for the same model")
        for m, value in zip(self.masters, masters):
            m.data[...] = value
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self._sync()
        self._cast(list(range(len(self.params))))

"""Gradient clipping by global L2 norm (torch.nn.utils.clip_grad_norm_), as tile kernels:
a per-block sum of squares in float64 (one launch per dtype), combined on the host with
math.fsum (correctly rounded, so order-free), and one rescale launch per dtype.
"""

from __future__ import annotations

import math

import numpy as np

from tilepy.models.kernels import record as hooks
from tilepy.models.optim.flat import dtype_name
from tilepy.models.optim.kernels import compute_dtype, scale_kernel, sumsq_kernel
from tilepy.models.training.errors import OptimizerError, user_loc

BLOCK = 1024


def _pack(grads: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The gradients end to end in one buffer padded with zeros to whole blocks, and the
    blocks' starts."""
    n = sum(g.size for g in grads)
    nb = max(-(-n // BLOCK), 1)
    flat = np.zeros(nb * BLOCK, grads[0].dtype)
    np.concatenate([g.reshape(-1) for g in grads], out=flat[:n])
    return flat, np.arange(nb, dtype=np.int32) * BLOCK


@hooks.host_op
def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> float:
    """Scale every gradient in place by min(1, max_norm / (total_norm + 1e-6)), where
    total_norm is the L2 norm of all gradients together; returns total_norm."""
    if norm_type != 2.0:
        raise OptimizerError(f"clip_grad_norm_ supports norm_type=2.0; got {norm_type!r}",
                             user_loc(), hint="clip by the global L2 norm")
    params = [parameters] if hasattr(parameters, "grad") else list(parameters)
    with_grad = [p for p in params if p.grad is not None]
    by_dtype: dict[str, list] = {}
    for k, p in enumerate(with_grad):
        by_dtype.setdefault(dtype_name(p, k), []).append(p)
    packed, partials = {}, []
    for dt, ps in by_dtype.items():
        flat, starts = _pack([np.asarray(p.grad) for p in ps])
        out = sumsq_kernel(block=BLOCK, dtype=dt)(flat, starts)
        packed[dt] = (ps, flat, starts)
        partials.extend(out.tolist())
    total = math.sqrt(math.fsum(partials))
    if error_if_nonfinite and not math.isfinite(total):
        raise OptimizerError(f"the total gradient norm is {total}", user_loc(),
                             hint="find the NaN/inf gradient, or pass error_if_nonfinite="
                                  "False to clip anyway")
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for dt, (ps, flat, starts) in packed.items():
            scale_kernel(block=BLOCK, dtype=dt)(flat, starts,
                                                np.array([coef], compute_dtype(dt)))
            off = 0
            for p in ps:
                p.grad[...] = flat[off:off + p.grad.size].reshape(p.grad.shape)
                off += p.grad.size
    return total

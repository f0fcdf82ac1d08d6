"""Compiling a model's kernels ahead of its first step, in parallel worker processes,
into the JIT's disk cache (Numba compiles on one core; two workers halve the wait on two
cores). A kernel is named by (module, factory, build arguments) so a worker can rebuild
it; the training process then loads each from the disk cache instead of compiling.
"""

from __future__ import annotations

import importlib
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

# Each kernel the digits models' training step launches (float32), slowest compiles first.
# (Convolutions without groups, their stride-1 dgrad and wgrad too, run conv2d_padded:
# 8-row tiles for 6 filters, 16-row for 16; 2x2 pools tile their input; ReLU is binary's.)
LENET5 = [
    ("tilepy.models.kernels.conv", "conv2d_padded", {}),
    ("tilepy.models.kernels.conv", "conv2d_padded", dict(block_M=16)),
    ("tilepy.kernels.gemm", "gemm", dict(in_dtype="float32", out_dtype="float32",
                                         accum_dtype="float32")),
    ("tilepy.models.kernels.xent", "softmax_xent", dict(block_C=16)),
    ("tilepy.models.kernels.pool", "pool2d_tiled_bwd", dict(kind="max")),
    ("tilepy.models.kernels.pool", "pool2d_tiled_fwd", dict(kind="max")),
    ("tilepy.kernels.reductions", "row_reduce", dict(kind="sum", dtype="float32",
                                                     out_dtype="float32")),
    ("tilepy.models.kernels.elementwise", "unary", {}),
    ("tilepy.models.kernels.elementwise", "binary", {}),
    ("tilepy.models.kernels.elementwise", "binary_rows", {}),  # bias adds
    ("tilepy.models.optim.kernels", "sgd_kernel", dict(block=1024, dtype="float32",
                                                       momentum=True)),
]
MLP = [k for k in LENET5 if "conv" not in k[0] and "pool" not in k[0]]
# (the digits script's update is optim.SGD with momentum: one flat kernel, last above)


def build(spec):
    module, factory, kwargs = spec
    return getattr(importlib.import_module(module), factory)(**kwargs)


def _compile_one(spec) -> tuple[str, float]:
    from tilepy.jit import compile as jit_compile  # in the worker: loads Numba there

    t0 = time.perf_counter()
    jit_compile(build(spec).func, disk=True)
    return spec[1], time.perf_counter() - t0


def precompile(specs, workers: int = 2) -> list[tuple[str, float]]:
    """Compile `specs` into the disk cache with `workers` processes; (name, seconds) each
    (a kernel already cached takes a fraction of a second)."""
    if workers <= 1:
        return [_compile_one(s) for s in specs]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        return list(pool.map(_compile_one, specs))

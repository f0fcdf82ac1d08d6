"""`tilelang.testing`: seeding, the GPU `requires_*` markers (no-ops on the CPU reference:
the test runs), and `main()` (runs the calling module's `test_*` functions)."""

from __future__ import annotations

import random
import sys

import numpy as np

from tilepy.compat.tilelang.utils.tensor import torch_assert_close  # noqa: F401


def set_random_seed(seed: int = 42) -> None:
    random.seed(seed)
    np.random.seed(seed)
    try:
        import torch
    except ImportError:
        return
    torch.manual_seed(seed)


def _marker(*args, **kwargs):
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda fn: fn


def __getattr__(name: str):
    if name.startswith("requires_"):  # requires_cuda, requires_cuda_compute_version_ge...
        return _marker
    raise AttributeError(f"module 'tilelang.testing' has no attribute {name!r}")


def main() -> None:
    """Run every `test_*` function of the `__main__` module, in order."""
    mod = sys.modules["__main__"]
    for name, fn in list(vars(mod).items()):
        if name.startswith("test_") and callable(fn):
            fn()
    print("tilelang.testing.main: all tests passed")

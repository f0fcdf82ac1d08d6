"""`tilelang.utils.tensor`: how a profiler makes a kernel's inputs (`TensorSupplyType`,
`get_tensor_supply`) and TileLang's tolerant comparison (`torch_assert_close`). Inputs are
torch tensors when torch is installed (reference programs use torch), else numpy arrays.
"""

from __future__ import annotations

import enum

import numpy as np

from tilepy.errors import ArgumentError


class TensorSupplyType(enum.Enum):
    Integer = 1
    Uniform = 2
    Normal = 3
    Randn = 4
    Zero = 5
    One = 6
    Auto = 7


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def make_input(buf, supply=TensorSupplyType.Auto, rng=None):
    """An input for global buffer `buf` (a tilepy IR Buffer with a static shape)."""
    shape = buf.static_shape()
    if shape is None:
        raise ArgumentError(f"cannot make an input for {buf.name}: its shape is symbolic",
                            hint="give the profiler the inputs (input_tensors=...) or build "
                                 "the kernel with concrete sizes")
    rng = rng or np.random.default_rng(0)
    dt = buf.dtype
    if supply is TensorSupplyType.Auto:
        supply = TensorSupplyType.Integer if dt.is_int or dt.itemsize == 1 else \
            TensorSupplyType.Uniform
    if supply is TensorSupplyType.Zero:
        vals = np.zeros(shape)
    elif supply is TensorSupplyType.One:
        vals = np.ones(shape)
    elif supply is TensorSupplyType.Integer:
        # TileLang's supply: 0..2 for unsigned integers, -2..2 for the others
        lo, hi = (0, 2) if dt.is_bool else (0, 3) if dt.kind == "uint" else (-2, 3)
        vals = rng.integers(lo, hi, shape)
    elif supply in (TensorSupplyType.Normal, TensorSupplyType.Randn):
        vals = rng.standard_normal(shape)
    else:
        vals = rng.uniform(-1.0, 1.0, shape)
    arr = np.ascontiguousarray(vals.astype(dt.np_dtype))
    if _has_torch():
        from tilepy.compat.torch_bridge import to_torch

        return to_torch(arr)
    return arr


def get_tensor_supply(supply_type=TensorSupplyType.Auto):
    """A function: parameter -> a new input for it."""
    return lambda param: make_input(param, supply_type)


def _as_f64(x) -> np.ndarray:
    from tilepy.compat.torch_bridge import is_tensor, to_numpy

    if is_tensor(x):
        x = to_numpy(x.cpu() if hasattr(x, "cpu") else x)
    return np.asarray(x).astype(np.float64)


def torch_assert_close(actual, expected, rtol=1e-5, atol=1e-8, max_mismatched_ratio=0.001,
                       verbose=False, equal_nan=True, check_device=True, check_dtype=False,
                       base_name="LHS", ref_name="RHS"):
    """Raise AssertionError if more than `max_mismatched_ratio` of the elements differ by
    more than atol + rtol * |expected| (TileLang's tolerant comparison)."""
    a, b = _as_f64(actual), _as_f64(expected)
    if a.shape != b.shape:
        raise AssertionError(f"shapes differ: {base_name} {a.shape}, {ref_name} {b.shape}")
    bad = ~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
    ratio = bad.mean() if bad.size else 0.0
    if ratio > max_mismatched_ratio:
        i = np.unravel_index(int(np.argmax(bad)), bad.shape)
        raise AssertionError(
            f"{int(bad.sum())} of {bad.size} elements differ ({ratio:.2%} > "
            f"{max_mismatched_ratio:.2%}); first at {tuple(int(x) for x in i)}: "
            f"{base_name} {a[i]!r}, {ref_name} {b[i]!r} (rtol={rtol}, atol={atol})")


def map_torch_type(name):
    """torch's dtype for a TileLang dtype name (`"e4m3_float8"` -> `torch.float8_e4m3fn`)."""
    from tilepy.frontend.dtypes import dtype

    return dtype(name).as_torch()

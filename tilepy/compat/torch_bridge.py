"""torch tensors in and out of kernels, without copies on the CPU: a tensor's storage is
viewed as the numpy / ml_dtypes array a kernel takes (narrow floats through same-width
integer views, as numpy has no bfloat16 or float8), and outputs go back as tensors. torch
stays optional: nothing here imports it unless a tensor is passed.
"""

from __future__ import annotations

import numpy as np

from tilepy.errors import ArgumentError

# torch dtype name -> (integer dtype of the same width for the view, ml_dtypes name)
_VIA_INT = {"bfloat16": ("int16", "bfloat16"), "float8_e4m3fn": ("uint8", "float8_e4m3fn"),
            "float8_e5m2": ("uint8", "float8_e5m2"), "float8_e4m3fnuz": ("uint8",
                                                                            "float8_e4m3fnuz"),
            "float8_e5m2fnuz": ("uint8", "float8_e5m2fnuz"),
            "float8_e8m0fnu": ("uint8", "float8_e8m0fnu")}


def is_tensor(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "detach")


def to_numpy(t, who: str = "a tensor") -> np.ndarray:
    """A CPU tensor's storage as an array (no copy)."""
    import ml_dtypes
    import torch

    if t.device.type != "cpu":
        raise ArgumentError(
            f"{who} is on device {t.device}; tilepy runs on the CPU", hint="pass x.cpu(), or "
            "call tilepy.compat.install(cuda_to_cpu=True) before the program creates tensors")
    t = t.detach()
    name = str(t.dtype).removeprefix("torch.")
    if name in _VIA_INT:
        via, ml = _VIA_INT[name]
        return t.view(getattr(torch, via)).numpy().view(getattr(ml_dtypes, ml))
    return t.numpy()


def to_torch(a: np.ndarray):
    """An array as a tensor sharing its memory."""
    import torch

    name = a.dtype.name
    if name in _VIA_INT:
        via, _ = _VIA_INT[name]
        return torch.from_numpy(a.view(via)).view(getattr(torch, name))
    return torch.from_numpy(a)


def from_torch(args):
    """(args with tensors as arrays, a function that turns the kernel's outputs back into
    tensors when any argument was one)."""
    if not any(is_tensor(a) for a in args):
        return args, lambda out: out
    conv = tuple(to_numpy(a, f"argument {i}") if is_tensor(a) else a
                 for i, a in enumerate(args))

    def back(out):
        if isinstance(out, tuple):
            return tuple(to_torch(o) for o in out)
        return None if out is None else to_torch(out)

    return conv, back


def unpack_int4(buf_dtype, shape, arr):
    """int4 / uint4 data given as 8-bit storage (two values a byte, the first in the low
    nibble, as TileLang and torch programs pass it): the unpacked array of `shape`, else
    `arr` unchanged. A copy, so only for arrays the kernel reads."""
    if buf_dtype.name not in ("int4", "uint4") or not isinstance(arr, np.ndarray):
        return arr
    if arr.dtype not in (np.int8, np.uint8) or len(shape) != arr.ndim or not shape:
        return arr
    if tuple(arr.shape[:-1]) != tuple(shape[:-1]) or arr.shape[-1] * 2 != shape[-1]:
        return arr
    b = arr.view(np.uint8)
    nib = np.stack([b & 0xF, b >> 4], axis=-1).reshape(shape).astype(np.int8)
    if buf_dtype.name == "int4":
        nib = np.where(nib >= 8, nib - 16, nib).astype(np.int8)
    return np.ascontiguousarray(nib.astype(buf_dtype.np_dtype))

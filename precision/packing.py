"""Packing 4-bit codes (float4_e2m1fn, int4) two per byte, and unpacking them.

Layout: along the last axis, element 2i goes in the LOW nibble of byte i and element
2i+1 in the HIGH nibble (the order of PyTorch's float4_e2m1fn_x2 and of CUTLASS). An odd
length is padded with a zero nibble. Only moves bits: never rounds.
"""

from __future__ import annotations

import numpy as np

from tilepy.precision.formats import get_format


def pack_nibbles(codes) -> np.ndarray:
    """uint8 array of 4-bit codes (any shape; only the low nibble is used) -> uint8 array
    whose last axis is ceil(n / 2) long: low nibble = even element, high = odd element."""
    c = np.asarray(codes)
    if c.dtype.itemsize != 1:
        raise TypeError(f"pack_nibbles takes 1-byte codes, got {c.dtype}")
    c = c.view(np.uint8) & np.uint8(0x0F)
    if c.shape[-1] % 2:
        c = np.concatenate([c, np.zeros(c.shape[:-1] + (1,), np.uint8)], axis=-1)
    return c[..., 0::2] | (c[..., 1::2] << np.uint8(4))


def unpack_nibbles(packed, n: int | None = None) -> np.ndarray:
    """Inverse of `pack_nibbles`: uint8 codes (0..15), last axis `n` long (default
    2 * packed length)."""
    p = np.asarray(packed).view(np.uint8)
    out = np.empty(p.shape[:-1] + (2 * p.shape[-1],), np.uint8)
    out[..., 0::2] = p & np.uint8(0x0F)
    out[..., 1::2] = p >> np.uint8(4)
    return out if n is None else out[..., :n]


def pack(x, fmt: str = "float4_e2m1fn") -> np.ndarray:
    """Pack an array of a 4-bit format (ml_dtypes float4_e2m1fn / int4) two per byte."""
    x = np.asarray(x)
    if x.dtype.name != fmt:
        raise TypeError(f"pack expects a {fmt} array, got {x.dtype}; cast it first")
    return pack_nibbles(x.view(np.uint8))


def unpack(packed, n: int, fmt: str = "float4_e2m1fn") -> np.ndarray:
    """The `fmt` array (ml_dtypes float4_e2m1fn or int4) of `n` elements per row that
    `pack` packed."""
    # ml_dtypes stores both as the low nibble of a byte, high nibble clear
    return unpack_nibbles(packed, n).view(get_format(fmt).np_dtype)

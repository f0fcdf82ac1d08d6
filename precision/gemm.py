"""Scaled gemm reference in numpy (`scaled_gemm`): C = A @ B^T for operands in any table
format with their block scales, under one of the accumulation models of `ACCUMULATION`.

Owns the operand expansion and the k-ascending accumulation; gemm_jit.py, its Numba twin,
must give the same bits. Not a fast path: it says what such hardware should return.
"""

from __future__ import annotations

import numpy as np

from tilepy.precision import blocks
from tilepy.precision.formats import get_format

ACCUMULATION = {
    "exact": "p_k * s_k summed in float64, k ascending, one rounding to float32 at the end "
             "(exact for fp8/fp6/fp4/int8 elements with power-of-two scales while the sum "
             "fits 53 bits, e.g. e4m3 x e4m3 for K <= 2^17)",
    "fp32": "sequential float32: acc = fl32(acc + fl32(fl32(p_k) * s32_k)), k ascending "
            "(the DESIGN gemm contract; exact products for inputs of <= 12-bit significands)",
    "promote": "DeepSeek-V3: each run of `promote_every` k-steps is summed unscaled in a "
               "truncating accumulator of `mantissa_bits` bits, then fl32(part * s32) is "
               "added to a float32 accumulator (scales must be constant over each run)",
    "truncate": "hardware model: acc = trunc_m(acc + p_k * s_k), the exact sum truncated "
                "toward zero to `mantissa_bits` explicit mantissa bits after every add "
                "(13 bits reproduce H200 fp8 fast accumulation: -6.6% at K=4096, U[0,1))",
}
# p_k = a_mk * b_nk, element values (exact in float64); s_k = the product of both
# operands' block and tensor scales at k (s32_k = fl32(fl32(sa * sb) * fl32(ta * tb))).
MODES = tuple(ACCUMULATION)


def operand(x) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """(element values float32 (R, K), per-element block scales float32 (R, K), tensor
    scale) of a `Quantized` (blocks along K) or of a plain array in any format (scale 1)."""
    if isinstance(x, blocks.Quantized):
        s = blocks.get_scheme(x.scheme)
        if x.codes.ndim != 2:
            raise ValueError("scaled_gemm operands are 2-D (rows, K)")
        r, c = blocks.block_shape(s, x.codes.shape)
        vals = blocks._elem_values(x.codes, x.elem)
        s1, s2 = blocks.block_multipliers(x)
        s1 = np.repeat(np.repeat(s1.reshape(x.codes.shape[0] // r, -1), r, 0), c, 1)
        return vals, np.ascontiguousarray(s1, np.float32), np.float32(s2)
    a = np.asarray(x)
    if a.ndim != 2:
        raise ValueError("scaled_gemm operands are 2-D (rows, K)")
    get_format(a.dtype)  # any table format; values widen exactly to float32
    if a.dtype == np.float64:
        raise TypeError("scaled_gemm takes narrow operands; cast float64 input first")
    return a.astype(np.float32), np.ones(a.shape, np.float32), np.float32(1)


def check_mode(mode: str, mantissa_bits: int, promote_every: int, k: int) -> None:
    if mode not in ACCUMULATION:
        raise ValueError(f"unknown accumulation {mode!r}; known: {', '.join(MODES)}")
    if not 0 <= mantissa_bits <= 23:
        raise ValueError(f"mantissa_bits must be in 0..23, got {mantissa_bits}")
    if mode == "promote" and (promote_every < 1 or k % promote_every):
        raise ValueError(f"promote_every={promote_every} must divide K={k}")


def scaled_gemm(a, b, mode: str = "fp32", mantissa_bits: int = 13,
                promote_every: int = 128) -> np.ndarray:
    """C = A @ B^T (A: (M, K), B: (N, K), each a `Quantized` with blocks along K or a
    plain array of any format) as float32, accumulated per `ACCUMULATION[mode]`."""
    va, sa, ta = operand(a)
    vb, sb, tb = operand(b)
    if va.shape[1] != vb.shape[1]:
        raise ValueError(f"K differs: A is {va.shape}, B is {vb.shape} (B is (N, K))")
    k = va.shape[1]
    check_mode(mode, mantissa_bits, promote_every, k)
    t32 = np.float32(ta * tb)
    with np.errstate(all="ignore"):
        if mode == "exact":
            return _exact(va, sa, vb, sb, t32)
        if mode == "fp32":
            return _fp32(va, sa, vb, sb, t32)
        if mode == "truncate":
            return _truncate(va, sa, vb, sb, t32, mantissa_bits)
        _check_constant_scales(sa, sb, promote_every)
        return _promote(va, sa, vb, sb, t32, mantissa_bits, promote_every)


def trunc_bits(v: np.ndarray, m: int) -> np.ndarray:
    """float64 values truncated toward zero to m explicit mantissa bits."""
    keep = ~np.uint64((1 << (52 - m)) - 1)
    return (np.asarray(v, np.float64).view(np.uint64) & keep).view(np.float64)


def _scale64(sa, sb, t32, k):
    s = np.multiply.outer(sa[:, k].astype(np.float64), sb[:, k].astype(np.float64))
    return s * np.float64(t32)


def _scale32(sa, sb, t32, k):
    return np.multiply.outer(sa[:, k], sb[:, k]) * t32  # float32 products, rounded each


def _exact(va, sa, vb, sb, t32):
    acc = np.zeros((va.shape[0], vb.shape[0]))
    a64, b64 = va.astype(np.float64), vb.astype(np.float64)
    for k in range(va.shape[1]):
        acc = acc + np.multiply.outer(a64[:, k], b64[:, k]) * _scale64(sa, sb, t32, k)
    return acc.astype(np.float32)


def _fp32(va, sa, vb, sb, t32):
    acc = np.zeros((va.shape[0], vb.shape[0]), np.float32)
    a64, b64 = va.astype(np.float64), vb.astype(np.float64)
    for k in range(va.shape[1]):
        p = np.multiply.outer(a64[:, k], b64[:, k]).astype(np.float32)
        acc = acc + p * _scale32(sa, sb, t32, k)
    return acc


def _truncate(va, sa, vb, sb, t32, m):
    acc = np.zeros((va.shape[0], vb.shape[0]))
    a64, b64 = va.astype(np.float64), vb.astype(np.float64)
    for k in range(va.shape[1]):
        p = np.multiply.outer(a64[:, k], b64[:, k]) * _scale64(sa, sb, t32, k)
        acc = trunc_bits(acc + p, m)
    return acc.astype(np.float32)


def _promote(va, sa, vb, sb, t32, m, every):
    acc = np.zeros((va.shape[0], vb.shape[0]), np.float32)
    a64, b64 = va.astype(np.float64), vb.astype(np.float64)
    for k0 in range(0, va.shape[1], every):
        part = np.zeros(acc.shape)
        for k in range(k0, k0 + every):
            part = trunc_bits(part + np.multiply.outer(a64[:, k], b64[:, k]), m)
        acc = acc + part.astype(np.float32) * _scale32(sa, sb, t32, k0)
    return acc


def _check_constant_scales(sa, sb, every):
    for s in (sa, sb):
        runs = s.reshape(s.shape[0], -1, every)
        same = (runs == runs[:, :, :1]) | (np.isnan(runs) & np.isnan(runs[:, :, :1]))
        if not same.all():
            raise ValueError(f"promote needs scales constant over each run of {every} "
                             "k-steps; use a promote_every that divides the scale block")

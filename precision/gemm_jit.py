"""Numba twin of gemm.scaled_gemm: the same accumulation models, the same bits.

Owns only the loops (rows of C in parallel, k ascending per element); the models are the
ones gemm.ACCUMULATION documents. One compiled kernel serves every mode. Imports numba.
"""

from __future__ import annotations

import numba
import numpy as np

from tilepy.precision import gemm
from tilepy.precision.codecs64 import bits_f64, f64_bits

_MODE = {name: i for i, name in enumerate(gemm.MODES)}


@numba.njit(inline="always")
def _trunc(v, keep):
    return bits_f64(f64_bits(v) & keep)


@numba.njit(parallel=True)
def _gemm(va, sa, vb, sb, t32, mode, keep, every, out):
    kk = va.shape[1]
    for i in numba.prange(va.shape[0]):
        for j in range(vb.shape[0]):
            acc64 = 0.0
            acc32 = np.float32(0)
            part = 0.0
            for k in range(kk):
                p = np.float64(va[i, k]) * np.float64(vb[j, k])
                s32 = (sa[i, k] * sb[j, k]) * t32
                if mode == 0:  # exact
                    s64 = (np.float64(sa[i, k]) * np.float64(sb[j, k])) * np.float64(t32)
                    acc64 = acc64 + p * s64
                elif mode == 1:  # fp32
                    acc32 = acc32 + np.float32(p) * s32
                elif mode == 2:  # promote
                    part = _trunc(part + p, keep)
                    if (k + 1) % every == 0:
                        acc32 = acc32 + np.float32(part) * s32
                        part = 0.0
                else:  # truncate
                    s64 = (np.float64(sa[i, k]) * np.float64(sb[j, k])) * np.float64(t32)
                    acc64 = _trunc(acc64 + p * s64, keep)
            out[i, j] = np.float32(acc64) if mode == 0 or mode == 3 else acc32


def scaled_gemm(a, b, mode: str = "fp32", mantissa_bits: int = 13,
                promote_every: int = 128) -> np.ndarray:
    """Numba `tilepy.precision.gemm.scaled_gemm`: same arguments, same bits."""
    va, sa, ta = gemm.operand(a)
    vb, sb, tb = gemm.operand(b)
    if va.shape[1] != vb.shape[1]:
        raise ValueError(f"K differs: A is {va.shape}, B is {vb.shape} (B is (N, K))")
    gemm.check_mode(mode, mantissa_bits, promote_every, va.shape[1])
    if mode == "promote":
        gemm._check_constant_scales(sa, sb, promote_every)
    keep = np.uint64(~np.uint64((1 << (52 - mantissa_bits)) - 1))
    out = np.empty((va.shape[0], vb.shape[0]), np.float32)
    _gemm(va, sa, vb, sb, np.float32(ta * tb), _MODE[mode], keep, promote_every, out)
    return out

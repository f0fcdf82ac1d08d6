"""Numba twins of blocks.quantize / blocks.dequantize: the same rules, the same bits.

Owns only the parallel loops (one block per prange iteration); every rule (scale code,
element rounding, NaN blocks) is the one blocks.py documents, and tests compare the two
bit for bit. Importing this module imports numba.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numba
import numpy as np

from tilepy.precision import blocks
from tilepy.precision.codecs import bits_f32, byte_table, decoder, encoder, f32_bits
from tilepy.precision.formats import get_format


def _mx_element(elem: str):
    """(njit (x, multiplier) -> element code, njit scale code -> multiplier), as blocks._mx
    computes them: float elements x * 2^(127 - code) in float32; MXINT8 x * 2^(133 - code)
    in float64, rounded to an integer (ties to even) and clamped."""
    if get_format(elem).is_int:
        imax = float(blocks.MXINT8_MAX)
        rne = 1.5 * 2.0**52  # (v + rne) - rne rounds |v| < 2^51 to an integer, ties to even

        @numba.njit(inline="always")
        def int_mult(code):
            return math.ldexp(1.0, 133 - code)

        @numba.njit(inline="always")
        def int_code(x, mult):
            q = min(max((np.float64(x) * mult + rne) - rne, -imax), imax)
            return np.uint8(np.int64(q) & 0xFF)

        return int_code, int_mult
    enc = encoder(elem, True)

    @numba.njit(inline="always")
    def float_mult(code):
        return np.float32(math.ldexp(1.0, 127 - code))

    @numba.njit(inline="always")
    def float_code(x, mult):
        return enc(x * mult)

    return float_code, float_mult


@lru_cache(maxsize=None)
def _mx_kernel(elem: str, emax: int, rceil: bool):
    f = get_format(elem)
    elem_max = blocks.MXINT8_MAX / 64 if f.is_int else f.max_finite
    log2_max = int(np.floor(np.log2(elem_max)))
    elem_code, elem_mult = _mx_element(elem)

    @numba.njit(inline="always")
    def scale_code(amax):
        if amax == 0:
            return 0
        e = math.frexp(np.float64(amax))[1] - 1
        k = e - emax
        if rceil:
            k = e - log2_max
            if math.ldexp(elem_max, k - 1) >= amax:
                k -= 1
            elif math.ldexp(elem_max, k) < amax:
                k += 1
        return min(max(k + 127, 0), 254)

    @numba.njit(parallel=True)
    def run(x, n, r, c, codes, scales):
        for t in numba.prange(scales.size):
            off = _block_start(np.uint64(t), n, r, c)
            amax, bad = _block_amax(x, off, n, r, c)
            if bad:
                scales[t] = 255
                _zero_block(codes, off, n, r, c)
                continue
            code = scale_code(amax)
            scales[t] = code
            mult = elem_mult(code)
            for i in range(r):
                base = off + i * n
                for j in range(base, base + c):
                    codes[j] = elem_code(x[j], mult)

    return run


# Blocks are addressed in the flattened (rows, n) array with uint64 offsets (unsigned
# indices let LLVM drop the negative-index wraparound code): block t of a grid with
# n // c blocks per row band starts at (t // (n/c)) * r * n + (t % (n/c)) * c.


@numba.njit(inline="always")
def _block_start(t, n, r, c):
    nbc = n // c
    return (t // nbc) * r * n + (t % nbc) * c


@numba.njit(inline="always")
def _block_amax(x, off, n, r, c):
    """(amax, has NaN/inf) of a block: the max of |x| bit patterns, which orders like the
    values for finite floats and puts inf and NaN above them (vectorises; no float max)."""
    top = np.uint32(0)
    for i in range(r):
        base = off + i * n
        for j in range(base, base + c):
            top = max(top, np.uint32(f32_bits(x[j]) & np.uint32(0x7FFFFFFF)))
    return bits_f32(top), top >= np.uint32(0x7F800000)


@numba.njit(inline="always")
def _zero_block(codes, off, n, r, c):
    for i in range(r):
        base = off + i * n
        for j in range(base, base + c):
            codes[j] = 0


@lru_cache(maxsize=None)
def _nvfp4_kernel():
    enc_s = encoder("float8_e4m3fn", True)
    dec_s = decoder("float8_e4m3fn")
    enc = encoder("float4_e2m1fn", True)
    six = np.float32(blocks.NVFP4_E2M1_MAX)

    @numba.njit(parallel=True)
    def run(x, ts, n, r, c, codes, scales):
        for t in numba.prange(scales.size):
            off = _block_start(np.uint64(t), n, r, c)
            amax, bad = _block_amax(x, off, n, r, c)
            if bad:
                scales[t] = 0x7F
                _zero_block(codes, off, n, r, c)
                continue
            sb = enc_s(amax / (six * ts))
            scales[t] = sb
            denom = dec_s(sb) * ts
            for i in range(r):
                base = off + i * n
                for j in range(base, base + c):
                    v = x[j] / denom if denom > 0 else np.float32(0)
                    codes[j] = enc(v)

    return run


@lru_cache(maxsize=None)
def _fp32_kernel(elem: str):
    enc = encoder(elem, True)
    fmax = np.float32(get_format(elem).max_finite)

    @numba.njit(parallel=True)
    def run(x, n, r, c, codes, scales):
        for t in numba.prange(scales.size):
            off = _block_start(np.uint64(t), n, r, c)
            amax, bad = _block_amax(x, off, n, r, c)
            if bad:
                scales[t] = np.float32(np.nan)
                _zero_block(codes, off, n, r, c)
                continue
            scale = amax / fmax if amax > 0 else np.float32(1)
            scales[t] = scale
            for i in range(r):
                base = off + i * n
                for j in range(base, base + c):
                    codes[j] = enc(x[j] / scale)

    return run


def quantize(x, scheme: str, elem: str | None = None, rceil: bool = False) -> blocks.Quantized:
    """Numba `tilepy.precision.blocks.quantize`: same arguments, same bits."""
    s = blocks.get_scheme(scheme, elem)
    x = np.asarray(x)
    x = np.ascontiguousarray(x.astype(np.float32) if x.dtype != np.float32 else x)
    r, c = blocks.block_shape(s, x.shape)
    sshape = blocks._scale_shape(x.shape, r, c)
    codes = np.empty(x.size, np.uint8)
    scales = np.empty(x.size // (r * c), np.float32 if s.scale == "fp32" else np.uint8)
    geo = (np.uint64(x.shape[-1]), np.uint64(r), np.uint64(c))
    xf, ts = x.reshape(-1), None
    if s.scale == "e8m0":
        _mx_kernel(s.elem, s.emax, bool(rceil))(xf, *geo, codes, scales)
    elif s.scale == "nvfp4":
        ts = blocks.nvfp4_tensor_scale(x)
        _nvfp4_kernel()(xf, ts, *geo, codes, scales)
    else:
        _fp32_kernel(s.elem)(xf, *geo, codes, scales)
    return blocks.Quantized(s.name, s.elem, codes.reshape(x.shape), scales.reshape(sshape), ts)


@numba.njit(parallel=True)
def _dequant_kernel(codes, table, s1, s2, n, r, c, out):
    for t in numba.prange(s1.size):
        off = _block_start(np.uint64(t), n, r, c)
        sc = s1[t]
        for i in range(r):
            base = off + i * n
            for j in range(base, base + c):
                out[j] = (table[codes[j]] * sc) * s2


def dequantize(q: blocks.Quantized) -> np.ndarray:
    """Numba `tilepy.precision.blocks.dequantize`: same bits."""
    s = blocks.get_scheme(q.scheme)
    r, c = blocks.block_shape(s, q.codes.shape)
    codes = np.ascontiguousarray(q.codes).reshape(-1)
    s1, s2 = blocks.block_multipliers(q)
    out = np.empty(codes.size, np.float32)
    geo = (np.uint64(q.codes.shape[-1]), np.uint64(r), np.uint64(c))
    _dequant_kernel(codes, _table(q.elem), np.ascontiguousarray(s1).reshape(-1),
                    np.float32(s2), *geo, out)
    return out.reshape(q.codes.shape)


@lru_cache(maxsize=None)
def _table(elem: str) -> np.ndarray:
    """float32 value of each of the 256 byte codes (MXINT8: code / 64)."""
    if elem == "int8":
        return np.arange(256, dtype=np.uint8).view(np.int8).astype(np.float32) / np.float32(64)
    return byte_table(elem)

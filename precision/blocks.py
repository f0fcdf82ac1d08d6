"""Block-scaled quantisation in numpy, the reference (`SCHEMES`, `quantize`, `dequantize`):
MX, NVFP4, DeepSeek 1x128 / 128x128, per-channel and per-tensor amax scaling.

Blocks tile the last axis (the last two for 128x128); elements round through
`rounding.cast`. blocks_jit.py is the Numba twin and must give the same bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilepy.precision.formats import get_format
from tilepy.precision.rounding import cast, decode


@dataclass(frozen=True)
class Scheme:
    """A block-scaling scheme: element format, block shape over the last two axes
    (0 = the whole axis), scale kind ("e8m0", "nvfp4" or "fp32") and, for MX, emax."""

    name: str
    elem: str
    block: tuple[int, int]
    scale: str
    emax: int = 0


SCHEMES = {s.name: s for s in [
    Scheme("mxfp8_e4m3", "float8_e4m3fn", (1, 32), "e8m0", 8),
    Scheme("mxfp8_e5m2", "float8_e5m2", (1, 32), "e8m0", 15),
    Scheme("mxfp6_e2m3", "float6_e2m3fn", (1, 32), "e8m0", 2),
    Scheme("mxfp6_e3m2", "float6_e3m2fn", (1, 32), "e8m0", 4),
    Scheme("mxfp4", "float4_e2m1fn", (1, 32), "e8m0", 2),
    Scheme("mxint8", "int8", (1, 32), "e8m0", 0),
    Scheme("nvfp4", "float4_e2m1fn", (1, 16), "nvfp4"),
    Scheme("fp8_1x128", "float8_e4m3fn", (1, 128), "fp32"),
    Scheme("fp8_128x128", "float8_e4m3fn", (128, 128), "fp32"),
    Scheme("fp8_channel", "float8_e4m3fn", (1, 0), "fp32"),
    Scheme("fp8_tensor", "float8_e4m3fn", (0, 0), "fp32"),
]}
ALIASES = {"mxfp8": "mxfp8_e4m3", "mxfp6": "mxfp6_e2m3", "deepseek_act": "fp8_1x128",
           "deepseek_weight": "fp8_128x128"}
MXINT8_MAX = 127  # symmetric, as the OCP reference library clamps (-128 is never produced)
NVFP4_E2M1_MAX, NVFP4_E4M3_MAX = 6.0, 448.0


@dataclass(frozen=True)
class Quantized:
    """Element codes (storage uint8, x's shape, 4-bit codes one per byte: see `pack`),
    block scales (e8m0 codes for MX, e4m3 codes for NVFP4, float32 otherwise; shape = x's
    with each blocked axis divided by its block) and NVFP4's float32 tensor scale."""

    scheme: str
    elem: str
    codes: np.ndarray
    scales: np.ndarray
    tensor_scale: np.float32 | None = None


def get_scheme(name: str, elem: str | None = None) -> Scheme:
    """A scheme by name; `elem` swaps the element format of the fp32-scaled schemes."""
    key = ALIASES.get(name, name)
    if key not in SCHEMES:
        raise ValueError(f"unknown scaling scheme {name!r}; known: {', '.join(SCHEMES)}")
    s = SCHEMES[key]
    if elem is None:
        return s
    if s.scale != "fp32" or not get_format(elem).is_float:
        raise ValueError(f"{key} takes a float element format (fixed for MX/NVFP4), got {elem}")
    return Scheme(s.name, get_format(elem).name, s.block, s.scale)


def block_shape(s: Scheme, shape: tuple[int, ...]) -> tuple[int, int]:
    """The (rows, cols) of one block for an array of `shape` (viewed as (..., M, N))."""
    m, n = (shape[-2] if len(shape) > 1 else 1), shape[-1]
    r, c = s.block
    r, c = (r or m), (c or n)
    if n % c or m % r:
        raise ValueError(f"{s.name} needs the last axes divisible by its block {(r, c)}, "
                         f"got shape {shape}; pad the array")
    return r, c


def _blocked(x: np.ndarray, r: int, c: int) -> np.ndarray:
    """(..., M, N) -> (..., M/r, r, N/c, c) view."""
    x2 = x.reshape((-1,) + x.shape[-2:]) if x.ndim > 1 else x.reshape(1, 1, -1)
    b, m, n = x2.shape
    return x2.reshape(b, m // r, r, n // c, c)


def _scale_shape(shape: tuple[int, ...], r: int, c: int) -> tuple[int, ...]:
    if len(shape) == 1:
        return (shape[0] // c,)
    return shape[:-2] + (shape[-2] // r, shape[-1] // c)


def quantize(x, scheme: str, elem: str | None = None, rceil: bool = False) -> Quantized:
    """Quantise a float array with a block-scaling scheme (see SCHEMES / docs/precision.md).

    MX: scale code = clamp(floor(log2(amax)) - emax + 127, 0, 254) (`rceil=True`: the
    smallest power of two with amax / scale <= element max); elements RNE, saturating.
    A block holding NaN or inf gets scale 0xFF (NaN) and element codes 0. amax = 0 gives
    scale code 0. float32 arithmetic throughout; float64 input is rounded to float32 first.
    """
    s = get_scheme(scheme, elem)
    x = np.asarray(x)
    x = cast(x, "float32") if x.dtype != np.float32 else x
    r, c = block_shape(s, x.shape)
    xb = _blocked(x, r, c)
    with np.errstate(all="ignore"):
        amax = np.max(np.abs(xb), axis=(2, 4), keepdims=True)
        bad = ~np.isfinite(amax)
        if s.scale == "e8m0":
            codes, scales, ts = *_mx(xb, amax, bad, s, rceil), None
        elif s.scale == "nvfp4":
            codes, scales, ts = _nvfp4(xb, amax, bad, x)
        else:
            codes, scales, ts = *_amax_fp32(xb, amax, bad, s), None
    sshape = _scale_shape(x.shape, r, c)
    return Quantized(s.name, s.elem, codes.reshape(x.shape), scales.reshape(sshape), ts)


def mx_scale_codes(amax: np.ndarray, emax: int, elem_max: float, rceil: bool) -> np.ndarray:
    """E8M0 scale codes (int64) of finite block amaxes (float32 array)."""
    e = np.frexp(amax)[1].astype(np.int64) - 1  # floor(log2(amax)), exact (subnormals too)
    if rceil:  # smallest k with elem_max * 2^k >= amax
        k = e - int(np.floor(np.log2(elem_max)))
        k = np.where(np.ldexp(elem_max, (k - 1).astype(np.int32)) >= amax, k - 1, k)
        k = np.where(np.ldexp(elem_max, k.astype(np.int32)) < amax, k + 1, k)
    else:
        k = e - emax
    return np.where(amax > 0, np.clip(k + 127, 0, 254), 0)


def _mx(xb, amax, bad, s: Scheme, rceil: bool):
    f = get_format(s.elem)
    elem_max = MXINT8_MAX / 64 if f.is_int else f.max_finite
    code = mx_scale_codes(amax, s.emax, elem_max, rceil)
    if f.is_int:  # x * 2^(6 - k) in float64 (exact), RNE to an integer, clamp
        v = xb.astype(np.float64) * np.ldexp(1.0, (133 - code).astype(np.int32))
        q = np.clip(np.rint(v), -MXINT8_MAX, MXINT8_MAX).astype(np.int8).view(np.uint8)
    else:
        mult = np.ldexp(np.float32(1), (127 - code).astype(np.int32)).astype(np.float32)
        q = cast(xb * mult, f, saturate=True).view(np.uint8)
    q = np.where(bad, np.uint8(0), q)
    return q, np.where(bad, 255, code).astype(np.uint8)


def nvfp4_tensor_scale(x: np.ndarray) -> np.float32:
    """NVFP4's float32 tensor scale: amax(x) / (6 * 448), or 1 if amax is 0 or not finite."""
    with np.errstate(all="ignore"):
        gmax = np.float32(np.max(np.abs(x))) if x.size else np.float32(0)
    if not (np.isfinite(gmax) and gmax > 0):
        return np.float32(1)
    return np.float32(gmax / np.float32(NVFP4_E2M1_MAX * NVFP4_E4M3_MAX))


def _nvfp4(xb, amax, bad, x):
    ts = nvfp4_tensor_scale(x)
    sb = cast(amax / (np.float32(NVFP4_E2M1_MAX) * ts), "float8_e4m3fn", saturate=True)
    denom = sb.astype(np.float32) * ts
    v = np.where(denom > 0, xb / np.where(denom > 0, denom, np.float32(1)), np.float32(0))
    q = cast(v.astype(np.float32), "float4_e2m1fn", saturate=True).view(np.uint8)
    q = np.where(bad, np.uint8(0), q)
    sc = np.where(bad, np.uint8(0x7F), sb.view(np.uint8))
    return q, sc, np.float32(ts)


def _amax_fp32(xb, amax, bad, s: Scheme):
    f = get_format(s.elem)
    scale = np.where(amax > 0, amax / np.float32(f.max_finite), np.float32(1))
    scale = np.where(bad, np.float32(np.nan), scale).astype(np.float32)
    q = cast(xb / np.where(bad, np.float32(1), scale), f, saturate=True)
    q = np.where(bad, np.uint8(0), q.view(f.storage))
    return q, scale


def dequantize(q: Quantized) -> np.ndarray:
    """float32 values of a `Quantized`: (element * block multiplier) * tensor multiplier,
    each product rounded to float32 (see `block_multipliers`)."""
    s = get_scheme(q.scheme)
    r, c = block_shape(s, q.codes.shape)
    vb = _blocked(_elem_values(q.codes, q.elem), r, c)
    s1, s2 = block_multipliers(q)
    s1 = s1.reshape(vb.shape[0], vb.shape[1], 1, vb.shape[3], 1)
    with np.errstate(all="ignore"):
        out = (vb * s1) * np.float32(s2)
    return out.astype(np.float32).reshape(q.codes.shape)


def block_multipliers(q: Quantized) -> tuple[np.ndarray, np.float32]:
    """float32 per-block multiplier (MX: 2^(code - 127), NaN for 0xFF; NVFP4: the e4m3
    block scale; fp32 schemes: the scale) and the tensor multiplier (NVFP4's, else 1)."""
    s = get_scheme(q.scheme)
    if s.scale == "e8m0":
        sc = q.scales.astype(np.int32)
        with np.errstate(over="ignore"):  # code 255 (NaN) is replaced below
            mult = np.ldexp(np.float32(1), sc - 127).astype(np.float32)
        return np.where(sc == 255, np.float32(np.nan), mult), np.float32(1)
    if s.scale == "nvfp4":
        return decode(q.scales, "float8_e4m3fn"), np.float32(q.tensor_scale)
    return q.scales.astype(np.float32), np.float32(1)


def _elem_values(codes: np.ndarray, elem: str) -> np.ndarray:
    f = get_format(elem)
    if f.name == "int8":
        return codes.view(np.int8).astype(np.float32) * np.float32(1 / 64)
    return decode(codes, f)

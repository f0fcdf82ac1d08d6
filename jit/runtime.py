"""Run-time helpers the generated kernels call, and the namespace each tier runs them in.

Each helper is plain Python in Numba's subset, matching its op-table row's numpy form
(ir/ops.py) exactly: the `numba` tier wraps it with `njit`, the `py` tier calls it as it
is. Codecs come from tilepy.precision.codecs; nothing here decides semantics.
"""

from __future__ import annotations

import math
import types as _pytypes
from functools import lru_cache

import numpy as np

from tilepy.ir import scalar
from tilepy.ir.ops import CALLS
from tilepy.jit import faults

# the op table's scalar helpers (ir/scalar.py), by the names their scalar forms call
_OP_HELPERS = {name: row.helper for name, row in CALLS.items() if name.startswith("_")}
_max, _min = _OP_HELPERS["_max"], _OP_HELPERS["_min"]  # `_extreme` folds with these


def _flip_negative(b: int, bits: int) -> int:
    """b with every bit but the sign flipped when b is negative: float bits to order key
    and back (the map is its own inverse)."""
    return b ^ ((1 << (bits - 1)) - 1) if b < 0 else b


def _order_key(x):
    """A signed integer of x's width whose order is x's float order: -0 sorts below +0,
    and NaNs sort beyond +-inf (by sign). (numba tier: an intrinsic, `_numba_helpers`.)"""
    f = np.asarray(x)
    it = np.int32 if f.dtype.itemsize == 4 else np.int64
    return it(_flip_negative(int(f.view(it)[()]), f.dtype.itemsize * 8))


def _key_float(k, like):
    """The float of `like`'s dtype whose `_order_key` is k."""
    ft = np.asarray(like).dtype
    it = np.int32 if ft.itemsize == 4 else np.int64
    return np.asarray(_flip_negative(int(k), ft.itemsize * 8), dtype=it).view(ft)[()]


def _extreme(v, init, want_max):
    """The serial fold `acc = _max(acc, v[k])` (want_max; else `_min`) from `init`, k
    ascending, computed as integer max and min reductions over order keys, which LLVM
    vectorises (a float compare-and-select fold does not vectorise without fast-math
    function attributes, and its dependent chain costs a compare per element).

    The result equals the fold's whenever it is a nonzero number: equal nonzero floats
    have equal bits, so which occurrence wins does not show. A NaN anywhere (found because
    NaN keys lie beyond the keys of +-inf, so the largest or smallest key is a NaN's) or a
    zero result (where the fold's first-occurrence rule picks the sign) reruns the fold."""
    n = v.shape[0]
    if n == 0:
        return init
    hi = lo = _order_key(v[0])
    for k in range(1, n):
        key = _order_key(v[k])
        hi = key if key > hi else hi
        lo = key if key < lo else lo
    top, bottom = _key_float(hi, init), _key_float(lo, init)
    if top == top and bottom == bottom:
        r = _max(init, top) if want_max else _min(init, bottom)
        if r != 0 and r == r:
            return r
    r = init
    if want_max:
        for k in range(n):
            r = _max(r, v[k])
    else:
        for k in range(n):
            r = _min(r, v[k])
    return r


def _f2i(x, lo, hi):
    """float64 -> integer-valued float64 as `cast_values`: truncate, NaN -> 0, clamp."""
    if x != x:
        return np.float64(0.0)
    t = np.float64(np.trunc(x))
    return np.float64(lo) if t < lo else (np.float64(hi) if t > hi else t)


def _f2i64(x):
    """float64 -> int64: truncate, NaN -> 0, clamp (2**63 itself is out of range)."""
    if x != x:
        return np.int64(0)
    if x >= 9.223372036854775807e18:
        return np.int64(9223372036854775807)
    if x <= -9.223372036854775808e18:
        return np.int64(-9223372036854775808)
    return np.int64(x)


def _f2u64(x):
    """float64 -> uint64: truncate, NaN -> 0, clamp to [0, 2**64 - 1]."""
    if x != x or x <= 0:
        return np.uint64(0)
    if x >= 1.8446744073709552e19:
        return np.uint64(18446744073709551615)
    return np.uint64(x)


def _clamp(x, lo, hi):
    """Saturation: clamp to [lo, hi], NaN stays NaN."""
    return lo if x < lo else (hi if x > hi else x)


def _wrap_int4(x):
    v = np.int64(x) & 15
    return np.int8(v - 16 if v >= 8 else v)


def _wrap_uint4(x):
    return np.uint8(np.int64(x) & 15)


def _f32_odd(x):
    """float64 -> float32 rounded to odd: the float32 nearest toward zero, with its last bit
    set when inexact. Rounding that to a <= 12-bit format equals rounding `x` once."""
    f = np.float32(x)
    if f != f or np.float64(f) == x:
        return f
    if abs(np.float64(f)) > abs(x):
        f = np.nextafter(f, np.float32(0.0))
    return _from_bits32(_bits32(f) | np.uint32(1))


def _bits32(f):
    return np.asarray(f, dtype=np.float32).view(np.uint32)[()]


def _from_bits32(b):
    return np.asarray(b, dtype=np.uint32).view(np.float32)[()]


def _ld1(a, i, zero):
    return a[i] if 0 <= i < a.shape[0] else zero


def _ld2(a, i, j, zero):
    return a[i, j] if (0 <= i < a.shape[0] and 0 <= j < a.shape[1]) else zero


def _ld3(a, i, j, k, zero):
    ok = 0 <= i < a.shape[0] and 0 <= j < a.shape[1] and 0 <= k < a.shape[2]
    return a[i, j, k] if ok else zero


def _ld4(a, i, j, k, l, zero):
    ok = 0 <= i < a.shape[0] and 0 <= j < a.shape[1] and 0 <= k < a.shape[2]
    return a[i, j, k, l] if ok and 0 <= l < a.shape[3] else zero


def _ld5(a, i, j, k, l, m, zero):
    return a[i, j, k, l, m] if _in5(a, i, j, k, l, m) else zero


def _ld6(a, i, j, k, l, m, n, zero):
    return a[i, j, k, l, m, n] if _in6(a, i, j, k, l, m, n) else zero


def _in1(a, i):
    return 0 <= i < a.shape[0]


def _in2(a, i, j):
    return 0 <= i < a.shape[0] and 0 <= j < a.shape[1]


def _in3(a, i, j, k):
    return 0 <= i < a.shape[0] and 0 <= j < a.shape[1] and 0 <= k < a.shape[2]


def _in4(a, i, j, k, l):
    return _in3(a, i, j, k) and 0 <= l < a.shape[3]


def _in5(a, i, j, k, l, m):
    return _in4(a, i, j, k, l) and 0 <= m < a.shape[4]


def _in6(a, i, j, k, l, m, n):
    return _in5(a, i, j, k, l, m) and 0 <= n < a.shape[5]


def _below(a, b):
    """`0 <= a and a < b` for signed integers: one unsigned comparison of the two as int64
    (a negative `a` wraps past every bound; a negative `b` admits nothing), which LLVM
    keeps branch-free where the pair of comparisons against a run-time `b` kept the loop
    around it scalar."""
    return np.uint64(np.int64(a)) < np.uint64(max(np.int64(b), 0))


def _apart(a, b):
    """Whether two C-contiguous arrays share no byte (jit/passes/fusion.py's alias test)."""
    a0, b0 = np.uint64(a.ctypes.data), np.uint64(b.ctypes.data)
    return a0 + np.uint64(a.nbytes) <= b0 or b0 + np.uint64(b.nbytes) <= a0


HELPERS = {**_OP_HELPERS, **{f.__name__: f for f in (
    _extreme, _f2i, _f2i64, _f2u64, _clamp,
    _wrap_int4, _wrap_uint4, _f32_odd, _ld1, _ld2, _ld3, _ld4, _ld5, _ld6, _in1, _in2, _in3,
    _in4, _in5, _in6, _below, _apart,
)}}
MAX_GUARDED_RANK = 6


# ------------------------------------------------------------------ the py tier


def _py_math() -> _pytypes.SimpleNamespace:
    """`math` for the py tier: each `math.name` a scalar form calls, as its row's py-tier
    function (IEEE results, inf and NaN, instead of Python's exceptions)."""
    fns = {name[5:]: row.py for name, row in CALLS.items() if name.startswith("math.")}
    return _pytypes.SimpleNamespace(**fns, inf=math.inf, nan=math.nan)


def _py_codec(name: str, kind: str):
    from tilepy.precision import cast, decode, encode

    if kind == "dec":
        return lambda c: decode(np.asarray(c), name)[()]
    if kind == "enc":
        return lambda x: encode(np.float32(x), name)[()]
    if kind == "encs":
        return lambda x: encode(np.float32(x), name, saturate=True)[()]
    if kind == "rnd":
        return lambda x: np.float32(cast(np.float32(x), name).astype(np.float32))
    raise AssertionError(kind)


def py_namespace(codecs: tuple[tuple[str, str], ...]) -> dict:
    from tilepy.jit.mathlib import py_math

    # the op rows' py-tier functions, in place of their helpers
    ops = {name: row.py for name, row in CALLS.items() if name.startswith("_")}
    ns = {"np": np, "math": _py_math(), "prange": range, **HELPERS, **ops, **py_math(),
          "_bits32": _bits32, "_from_bits32": _from_bits32}
    for kind, fmt in codecs:
        ns[codec_name(kind, fmt)] = _py_codec(fmt, kind)
    ns.update(faults.py_helpers())
    return ns


# ------------------------------------------------------------------ the numba tier


def codec_name(kind: str, fmt: str) -> str:
    """`_dec_bfloat16`, `_enc_float8_e4m3fn`, `_encs_...` (saturating), `_rnd_...`."""
    return f"_{kind}_{fmt}"


# Every shared helper is compiled with an explicit fastmath=False: Numba compiles a callee
# with the flags of its first caller unless the callee sets them, and reuses that code for
# every later caller (numba#7168), so a helper first reached from a fast kernel would give
# exact kernels fast-math code (a max that loses -0 and NaN). Set on the wrapper, the flag also
# holds for what it calls (the precision codecs).
_EXACT = {"fastmath": False}


@lru_cache(maxsize=None)
def _numba_helpers() -> dict:
    import numba
    from llvmlite import ir as llvm_ir
    from numba import types
    from numba.extending import intrinsic, overload

    from tilepy.precision.bits import bits_f32, f32_bits

    @overload(scalar._nbits, inline="always")
    def _nbits_ov(a):
        bits = a.bitwidth
        return lambda a: bits

    @overload(_bits32, inline="always")
    def _bits32_ov(f):
        return lambda f: f32_bits(np.float32(f))

    @overload(_from_bits32, inline="always")
    def _from_bits32_ov(b):
        return lambda b: bits_f32(b)

    @intrinsic
    def order_key(typingctx, x):
        if x not in (types.float32, types.float64):
            return None
        w = x.bitwidth

        def codegen(context, builder, signature, args):
            i = llvm_ir.IntType(w)
            b = builder.bitcast(args[0], i)
            low = llvm_ir.Constant(i, (1 << (w - 1)) - 1)  # all bits but the sign
            return builder.xor(b, builder.and_(builder.ashr(b, llvm_ir.Constant(i, w - 1)), low))

        return (types.int32 if w == 32 else types.int64)(x), codegen

    @intrinsic
    def key_float(typingctx, k, like):
        if like not in (types.float32, types.float64) or k.bitwidth != like.bitwidth:
            return None
        w = like.bitwidth

        def codegen(context, builder, signature, args):
            i = llvm_ir.IntType(w)
            b = args[0]
            low = llvm_ir.Constant(i, (1 << (w - 1)) - 1)
            b = builder.xor(b, builder.and_(builder.ashr(b, llvm_ir.Constant(i, w - 1)), low))
            return builder.bitcast(b, llvm_ir.FloatType() if w == 32 else llvm_ir.DoubleType())

        return like(k, like), codegen

    @overload(_order_key, inline="always")
    def _order_key_ov(x):
        return lambda x: order_key(x)

    @overload(_key_float, inline="always")
    def _key_float_ov(k, like):
        return lambda k, like: key_float(k, like)

    # helpers calling helpers (`_extreme` -> `_max`) must see the njit versions: each is
    # rebuilt over one shared globals dict that maps the names to them
    g = {**vars(scalar), **globals()}
    out = {name: numba.njit(_pytypes.FunctionType(fn.__code__, g, name, fn.__defaults__,
                                                  fn.__closure__), **_EXACT)
           for name, fn in HELPERS.items()}
    g.update(out)
    out["_bits32"] = numba.njit(lambda f: f32_bits(np.float32(f)), **_EXACT)
    out["_from_bits32"] = numba.njit(lambda b: bits_f32(b), **_EXACT)
    return out


@lru_cache(maxsize=None)
def _numba_codec(kind: str, fmt: str):
    """The precision layer's codec, wrapped in a plain (not IR-inlined) njit function:
    Numba's IR inlining of codecs at every call site makes big kernels compile for
    minutes; LLVM still inlines the wrapper where it pays."""
    import numba

    from tilepy.precision.codecs import decoder, encoder

    if kind == "dec":
        dec = decoder(fmt)
        return numba.njit(lambda c: dec(c), **_EXACT)
    if kind in ("enc", "encs"):
        enc = encoder(fmt, saturate=kind == "encs")
        return numba.njit(lambda x: enc(x), **_EXACT)
    enc, dec = encoder(fmt), decoder(fmt)
    return numba.njit(lambda x: dec(enc(x)), **_EXACT)


def numba_namespace(codecs: tuple[tuple[str, str], ...]) -> dict:
    import numba

    from tilepy.jit.mathlib import numba_math

    ns = {"np": np, "math": math, "prange": numba.prange, **_numba_helpers(), **numba_math()}
    for kind, fmt in codecs:
        ns[codec_name(kind, fmt)] = _numba_codec(kind, fmt)
    ns.update(faults.numba_helpers())
    return ns

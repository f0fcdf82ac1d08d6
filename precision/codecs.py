"""Numba bit codecs: float32 <-> storage-code functions for njit kernels, bit-equal to
ml_dtypes (numpy for float16), and parallel array wrappers (bfloat16 arrays stream through
explicit vector kernels). Encoders round to nearest even, optionally saturate or round
stochastically from given random bits; the rules live in codespec/rounding. Importing this
module imports numba (`import tilepy.precision` never does).
"""

from __future__ import annotations

import math
import platform
from functools import lru_cache

import numba
import numpy as np
from llvmlite import ir as llvm_ir
from numba import types
from numba.extending import intrinsic

from tilepy.precision.bits import bits_f32, f32_bits  # noqa: F401  (re-exported)
from tilepy.precision.codespec import CodeSpec, code_spec
from tilepy.precision.formats import get_format
from tilepy.precision.numba_target import configure

configure()  # before Numba's first compile in this process: vector width (see the module)


def decode_table(fmt) -> np.ndarray:
    """float32 value of every code of a <= 8-bit float format, from the field layout
    (sign, exponent, mantissa; NaN as ml_dtypes: +-0x7fc00000), independent of ml_dtypes."""
    s = code_spec(fmt)
    c = np.arange(1 << s.bits, dtype=np.int64)
    neg = (c & s.sign_bit) != 0
    mag = c & ~s.sign_bit & s.mask
    e, m = mag >> s.man_bits, mag & ((1 << s.man_bits) - 1)
    if s.name == "float8_e8m0fnu":
        val = np.ldexp(1.0, (c - s.bias).astype(np.int32))
    else:
        sub = np.ldexp(m.astype(np.float64), s.emin - s.man_bits)
        norm = np.ldexp(1.0 + m / (1 << s.man_bits), (e - s.bias).astype(np.int32))
        val = np.where(e == 0, sub, norm)
    val = np.where(neg, -val, val)
    inf = (mag == s.ovf_pos) & (s.ovf_pos != s.max_code) & (s.ovf_pos != s.nan_pos)
    val = np.where(inf, np.where(neg, -np.inf, np.inf), val)
    nan = (mag > s.max_code) & ~inf
    if s.fnuz:
        nan = c == 0x80
    with np.errstate(over="ignore"):  # inf rows
        out = val.astype(np.float32)
    out[nan] = np.where(neg[nan] | s.fnuz, np.float32(-np.nan), np.float32(np.nan))
    return out


# ---------------------------------------------------------------------------- encoders


def _make_encoder(s: CodeSpec, saturate: bool):
    U = np.uint32  # all arithmetic in uint32 (numba widens to 64 bits otherwise)
    M = s.man_bits
    drop = U(23 - M)
    half_m1 = U((1 << (23 - M - 1)) - 1)
    rebias = U((127 - s.bias) << M)
    min_norm_bits = U(0 if s.exp_bits == 8 else (s.emin + 127) << 23)
    magic = np.float32(2.0 ** (s.emin - M + 23))
    magic_bits = U(magic.view(np.uint32))
    max_code, sign_bit, fnuz = U(s.max_code), U(s.sign_bit), s.fnuz
    ovf = max_code if saturate else U(s.ovf_pos)  # the overflow code's magnitude part
    assert saturate or s.ovf_neg == s.sign_bit | s.ovf_pos
    nan_pos, nan_neg, payload = U(s.nan_pos), U(s.nan_neg), s.nan_rule == "payload"
    out_t = np.uint8 if s.bits <= 8 else np.uint16

    @numba.njit(inline="always")
    def encode(x):
        b = f32_bits(np.float32(x))
        a = b & U(0x7FFFFFFF)
        neg = b >> U(31)
        norm = U(U(U(a + half_m1) + U((a >> drop) & U(1))) >> drop) - rebias
        sub = U(f32_bits(bits_f32(a) + magic) - magic_bits)
        code = U(norm) if a >= min_norm_bits else sub
        code = ovf if code > max_code else code
        res = code | (sign_bit if neg else U(0))
        if fnuz and code == 0:
            res = U(0)
        if a > U(0x7F800000):
            if payload:
                p = (a >> U(13)) & U(0x3FF)
                res = (neg << U(15)) | U(0x7C00) | (p if p != 0 else U(1))
            else:
                res = nan_neg if neg else nan_pos
        return out_t(res)

    return encode


def _make_e8m0_encoder(saturate: bool):
    top = 0xFE if saturate else 0xFF

    @numba.njit(inline="always")
    def encode(x):
        b = f32_bits(np.float32(x))
        if b == 0x7F800000:
            return np.uint8(top)
        if b >= 0x7F800000 or b == 0:  # NaN, -inf, negatives, +0
            return np.uint8(0xFF)
        if b < 0x800000:  # subnormals: 2^-126 from 1.5 * 2^-127 up, else 2^-127
            return np.uint8(1 if b >= 0x600000 else 0)
        code = (b >> 23) + ((b >> 22) & 1)
        return np.uint8(top if code > 254 else code)

    return encode


def _make_int_encoder(fmt, saturate: bool):
    f = get_format(fmt)
    lo, hi, mask = f.min_value, f.max_finite, (1 << f.bits) - 1

    @numba.njit(inline="always")
    def encode(x):
        v = np.float32(x)
        if v != v:
            return np.uint8(0)
        v = min(max(v, lo), hi)
        return np.uint8(np.int64(v) & mask)

    return encode


def encoder(fmt, saturate: bool = False):
    """The njit scalar encoder of `fmt`: float32 -> storage code (uint8 / uint16, int4 as
    its low nibble). Float formats: RNE, overflow per ml_dtypes or clamped to +-max finite
    when `saturate`; bits equal `tilepy.precision.encode`. int8/int4: truncate toward
    zero, clamp, NaN -> 0 (as `cast`)."""
    return _encoder(get_format(fmt).name, bool(saturate))


@lru_cache(maxsize=None)
def _encoder(name: str, saturate: bool):
    f = get_format(name)
    if f.name in ("int8", "int4"):
        return _make_int_encoder(f, saturate)
    if f.name == "float8_e8m0fnu":
        return _make_e8m0_encoder(saturate)
    if f.name == "bfloat16" and not saturate:
        return _make_bf16_encoder()
    return _make_encoder(code_spec(f), saturate)


def _make_bf16_encoder():
    """bfloat16 is float32's top half, so RNE is one integer add on the bits (`_bf16_code`,
    the array codec's scalar step): the same codes as `_make_encoder`'s general form, in a
    third of its operations (it is most of a narrow output store's time)."""

    @numba.njit(inline="always")
    def encode(x):
        return _bf16_code(f32_bits(np.float32(x)))

    return encode


def encoder_sr(fmt, saturate: bool = False):
    """The njit stochastic encoder of a float format: (float32 x, uint32 r) -> code, the
    same bits as `tilepy.precision.stochastic_round` given the same r."""
    return _encoder_sr(get_format(fmt).name, bool(saturate))


@lru_cache(maxsize=None)
def _encoder_sr(name: str, saturate: bool):
    s = code_spec(name)
    enc = _encoder(name, saturate)
    emin, man = s.emin, s.man_bits

    @numba.njit(inline="always")
    def encode(x, r):
        v = np.float64(np.float32(x))
        if not math.isfinite(v):
            return enc(x)
        ax = abs(v)
        e = math.frexp(ax)[1] - 1
        ulp = math.ldexp(1.0, max(e, emin) - man)
        q = ax / ulp
        down = math.floor(q)
        if (q - down) * 4294967296.0 > np.float64(r):
            down += 1.0
        return enc(np.float32(math.copysign(down * ulp, v)))

    return encode


# ---------------------------------------------------------------------------- decoders


def byte_table(fmt) -> np.ndarray:
    """decode_table extended to all 256 byte values for fp6/fp4, as ml_dtypes reads a
    byte with unused high bits set: negative iff code >= 2^(bits-1)."""
    t = decode_table(fmt)
    if t.size == 256:
        return t
    half = t.size // 2
    c = np.arange(256)
    return t[np.where(c >= half, half, 0) | (c & (half - 1))]


def _make_table_decoder(fmt):
    table = byte_table(fmt)

    @numba.njit(inline="always")
    def decode(code):
        return table[np.uint8(code)]

    return decode


@numba.njit(inline="always")
def _decode_bfloat16(code):
    return bits_f32(np.uint32(code) << 16)


@numba.njit(inline="always")
def _decode_float16(code):
    h = np.uint32(code)
    sign = (h >> 15) << 31
    e = (h >> 10) & 0x1F
    m = h & 0x3FF
    if e == 0x1F:
        return bits_f32(sign | 0x7F800000 | (m << 13))
    if e == 0:
        v = np.float32(m) * np.float32(2.0**-24)
        return -v if sign else v
    return bits_f32(sign | ((e + 112) << 23) | (m << 13))


def _make_int_decoder(fmt):
    bits = get_format(fmt).bits
    top = 1 << (bits - 1)

    @numba.njit(inline="always")
    def decode(code):
        c = np.int64(code) & ((1 << bits) - 1)
        return np.float32(c - 2 * top if c >= top else c)

    return decode


def decoder(fmt):
    """The njit scalar decoder of `fmt`: storage code -> float32, bits equal to ml_dtypes'
    `astype(float32)` (numpy's for float16, NaN payloads included)."""
    return _decoder(get_format(fmt).name)


@lru_cache(maxsize=None)
def _decoder(name: str):
    f = get_format(name)
    if f.name == "bfloat16":
        return _decode_bfloat16
    if f.name == "float16":
        return _decode_float16
    if f.name in ("int8", "int4"):
        return _make_int_decoder(f)
    code_spec(f)  # rejects formats with no codec
    return _make_table_decoder(f)


def rounder(fmt):
    """The njit float32 -> float32 of `round_to` for one element: decode(encode(x)), the
    value rounded to `fmt` (the JIT's rounding after each narrow-float operation)."""
    return _rounder(get_format(fmt).name)


@lru_cache(maxsize=None)
def _rounder(name: str):
    enc, dec = _encoder(name, False), _decoder(name)

    @numba.njit(inline="always")
    def round_one(x):
        return dec(enc(x))

    return round_one


# ---------------------------------------------------------------------------- arrays


@lru_cache(maxsize=None)
def _encode_kernel(fmt, saturate: bool):
    enc = encoder(fmt, saturate)

    @numba.njit(parallel=True)
    def run(x, out):
        for i in numba.prange(x.size):
            out[i] = enc(x[i])

    return run


@lru_cache(maxsize=None)
def _decode_kernel(fmt):
    dec = decoder(fmt)

    @numba.njit(parallel=True)
    def run(codes, out):
        for i in numba.prange(codes.size):
            out[i] = dec(codes[i])

    return run


@lru_cache(maxsize=None)
def _encode_sr_kernel(fmt, saturate: bool):
    enc = encoder_sr(fmt, saturate)

    @numba.njit(parallel=True)
    def run(x, r, out):
        for i in numba.prange(x.size):
            out[i] = enc(x[i], r[i])

    return run


def encode_sr_array(x, rbits, fmt, saturate: bool = False) -> np.ndarray:
    """Stochastically rounded storage codes of a float32 array, one uint32 of `rbits`
    (same shape; see `tilepy.precision.random_bits`) per element; same bits as
    `tilepy.precision.stochastic_round`."""
    f = get_format(fmt)
    x = np.ascontiguousarray(x, dtype=np.float32)
    r = np.ascontiguousarray(rbits, dtype=np.uint32)
    if r.shape != x.shape:
        raise ValueError(f"rbits has shape {r.shape}, x has {x.shape}: one word per element")
    out = np.empty(x.shape, dtype=f.storage)
    _encode_sr_kernel(f.name, bool(saturate))(x.reshape(-1), r.reshape(-1), out.reshape(-1))
    return out


@lru_cache(maxsize=None)
def _encode64_kernel(fmt, saturate: bool):
    from tilepy.precision.codecs64 import encoder64  # which imports this module

    enc = encoder64(fmt, saturate)

    @numba.njit(parallel=True)
    def run(x, out):
        for i in numba.prange(x.size):
            out[i] = enc(x[i])

    return run


# ------------------------------------------------------------- bfloat16 streaming kernels
#
# A bf16 code is the top half of the float32 bits (rounded to nearest even on the way
# down), so both directions are a few integer ops per element and the arrays' memory
# traffic is the whole cost. The kernels work on 32-element vectors. Large decodes store
# them with non-temporal stores: a plain store first reads the output line into the
# cache, and for decode that read is as large as the input. Encode writes half what it
# reads and was slower with them, so it keeps plain stores (docs/perf-log.md).

_LANES = 32  # elements per vector step: one 64-byte line of bf16 codes
_TASK = 1 << 16  # elements per parallel task (a multiple of _LANES)
_STREAM_MIN = 1 << 20  # elements from which outputs bypass the cache
_X86 = platform.machine().lower() in ("x86_64", "amd64")
_U = np.uint32


@numba.njit(inline="always")
def _bf16_code(b):
    """bfloat16 code of the float32 with bits b: RNE, NaN -> 0x7fc0 with b's sign."""
    rne = (b + _U(0x7FFF) + ((b >> _U(16)) & _U(1))) >> _U(16)
    nan = ((b >> _U(16)) & _U(0x8000)) | _U(0x7FC0)
    return np.uint16(nan if (b & _U(0x7FFFFFFF)) > _U(0x7F800000) else rne)


def _vector_ptr(context, builder, aty, arr, idx, vecty):
    data = context.make_array(aty)(context, builder, arr).data
    return builder.bitcast(builder.gep(data, [idx]), vecty.as_pointer())


def _splat(v: int, vt):
    return llvm_ir.Constant(vt, [llvm_ir.Constant(vt.element, v)] * vt.count)


def _store(builder, value, ptr, stream: bool, elem_bytes: int) -> None:
    st = builder.store(value, ptr, align=64 if stream else elem_bytes)
    if stream:
        one = llvm_ir.Constant(llvm_ir.IntType(32), 1)
        st.set_metadata("nontemporal", builder.module.add_metadata([one]))


@lru_cache(maxsize=None)
def _bf16_vector_ops(stream: bool):
    """(encode 32, decode 32, fence) intrinsics; `stream`: non-temporal stores, which need
    64-byte aligned output at the vector's index, and the fence that orders them."""
    i16, i32 = llvm_ir.IntType(16), llvm_ir.IntType(32)
    v16, v32 = llvm_ir.VectorType(i16, _LANES), llvm_ir.VectorType(i32, _LANES)

    @intrinsic
    def encode32(typingctx, bits, out, i):
        def codegen(context, builder, sig, args):
            b = builder.load(_vector_ptr(context, builder, sig.args[0], args[0], args[2],
                                         v32), align=4)
            hi = builder.lshr(b, _splat(16, v32))
            rne = builder.lshr(builder.add(builder.add(b, _splat(0x7FFF, v32)),
                                           builder.and_(hi, _splat(1, v32))), _splat(16, v32))
            nan = builder.or_(builder.and_(hi, _splat(0x8000, v32)), _splat(0x7FC0, v32))
            is_nan = builder.icmp_unsigned(">", builder.and_(b, _splat(0x7FFFFFFF, v32)),
                                           _splat(0x7F800000, v32))
            code = builder.trunc(builder.select(is_nan, nan, rne), v16)
            _store(builder, code, _vector_ptr(context, builder, sig.args[1], args[1],
                                              args[2], v16), stream, 2)
            return context.get_dummy_value()

        return types.void(bits, out, i), codegen

    @intrinsic
    def decode32(typingctx, codes, out, i):
        def codegen(context, builder, sig, args):
            c = builder.load(_vector_ptr(context, builder, sig.args[0], args[0], args[2],
                                         v16), align=2)
            v = builder.shl(builder.zext(c, v32), _splat(16, v32))
            _store(builder, v, _vector_ptr(context, builder, sig.args[1], args[1], args[2],
                                           v32), stream, 4)
            return context.get_dummy_value()

        return types.void(codes, out, i), codegen

    @intrinsic
    def fence(typingctx):
        def codegen(context, builder, sig, args):
            if stream:
                fn = builder.module.declare_intrinsic(
                    "llvm.x86.sse.sfence", fnty=llvm_ir.FunctionType(llvm_ir.VoidType(), []))
                builder.call(fn, [])
            return context.get_dummy_value()

        return types.void(), codegen

    return encode32, decode32, fence


@lru_cache(maxsize=None)
def _bf16_kernels(stream: bool):
    """(encode, decode) njit kernels (src, out, head): elements [0, head) one at a time,
    then tasks of _TASK elements from head (aligned there when `stream`) in parallel."""
    encode32, decode32, fence = _bf16_vector_ops(stream)

    @numba.njit(parallel=True)
    def encode(bits, out, head):
        n = bits.size
        head = min(head, n)
        for i in range(head):
            out[i] = _bf16_code(bits[i])
        for t in numba.prange((n - head + _TASK - 1) // _TASK):
            i = head + t * _TASK
            hi = min(n, i + _TASK)
            while i + _LANES <= hi:
                encode32(bits, out, i)
                i += _LANES
            for j in range(i, hi):
                out[j] = _bf16_code(bits[j])
            fence()

    @numba.njit(parallel=True)
    def decode(codes, out, head):
        n = codes.size
        head = min(head, n)
        for i in range(head):
            out[i] = _U(codes[i]) << _U(16)
        for t in numba.prange((n - head + _TASK - 1) // _TASK):
            i = head + t * _TASK
            hi = min(n, i + _TASK)
            while i + _LANES <= hi:
                decode32(codes, out, i)
                i += _LANES
            for j in range(i, hi):
                out[j] = _U(codes[j]) << _U(16)
            fence()

    return encode, decode


def _bf16_run(direction: str, src: np.ndarray, out: np.ndarray) -> None:
    """src (float32 bits as uint32, or uint16 codes) -> out (uint16 codes, or uint32 bits),
    both 1-d, contiguous and aligned to their element size."""
    stream = _X86 and direction == "decode" and out.size >= _STREAM_MIN
    head = (-out.ctypes.data) % 64 // out.itemsize if stream else 0
    encode, decode = _bf16_kernels(stream)
    (encode if direction == "encode" else decode)(src, out, head)


def _output(out, shape: tuple, dtype, what: str) -> np.ndarray:
    want = np.dtype(dtype)
    if out is None:
        return np.empty(shape, dtype=want)
    if not isinstance(out, np.ndarray) or out.dtype != want or out.shape != shape:
        got = (f"{out.dtype}{list(out.shape)}" if isinstance(out, np.ndarray)
               else type(out).__name__)
        raise ValueError(f"{what}: out must be a {want}{list(shape)} array; got {got}")
    if not (out.flags.c_contiguous and out.flags.aligned and out.flags.writeable):
        raise ValueError(f"{what}: out must be a C-contiguous, aligned, writeable array")
    return out


def encode_array(x, fmt, saturate: bool = False, out=None) -> np.ndarray:
    """Storage codes of a float array (any shape) encoded in parallel; same bits as
    `tilepy.precision.encode`. float32 goes through `encoder`, float64 through
    `codecs64.encoder64` (one rounding); other floats are widened to float32 (exact).
    `out`: a preallocated array of the storage dtype and x's shape to write into."""
    f = get_format(fmt)
    x = np.asarray(x)
    wide = x.dtype == np.float64
    x = np.require(x, np.float64 if wide else np.float32, ["C", "A"])
    out = _output(out, x.shape, f.storage, "encode_array")
    if f.name == "bfloat16" and not wide and not saturate:
        _bf16_run("encode", x.reshape(-1).view(np.uint32), out.reshape(-1))
        return out
    kernel = _encode64_kernel if wide else _encode_kernel
    kernel(f.name, bool(saturate))(x.reshape(-1), out.reshape(-1))
    return out


def decode_array(codes, fmt, out=None) -> np.ndarray:
    """float32 values of a storage-code array (any shape), decoded in parallel.
    `out`: a preallocated float32 array of the codes' shape to write into."""
    f = get_format(fmt)
    codes = np.require(codes, f.storage, ["C", "A"])
    out = _output(out, codes.shape, np.float32, "decode_array")
    if f.name == "bfloat16":
        _bf16_run("decode", codes.reshape(-1), out.reshape(-1).view(np.uint32))
    else:
        _decode_kernel(f.name)(codes.reshape(-1), out.reshape(-1))
    return out

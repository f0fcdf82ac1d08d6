"""`tilelang.quantize`: the bit-level converters TileLang programs call inside kernels to
unpack quantized storage (packed int4/int2 fields, fp4, fp8 e4m3), and the host-side weight
helpers. Each converter computes what TileLang's does on a GPU: the bit work in 32-bit
integers (C's integer promotion), then one cast to the requested dtype. The LOP3 / MXFP
intrinsic groups are CUDA/HIP source for `T.call_extern` and are refused as not portable.
"""

from __future__ import annotations

from tilepy.compat.tilelang.quantize.utils import (  # noqa: F401
    gen_quant4,
    general_compress,
    interleave_weight,
)
from tilepy.compat.tvm import tirx as _tir
from tilepy.errors import NotPortableError, TileTypeError


def _as(x, dt: str):
    """`x` as dtype `dt`: a runtime value is cast, a Python int stays an int."""
    return x.astype(dt) if hasattr(x, "astype") else int(x)


def _check(val, storage: str) -> None:
    got = str(getattr(val, "dtype", type(val).__name__))
    if got != storage:
        raise TileTypeError(f"quantize converter: expected a value of the storage dtype "
                            f"{storage}; got {got}",
                            hint="pass an element of the packed buffer, e.g. B_local[k // 2]")


def _field(val, pos, nbit: int, work: str = "int32"):
    """The `nbit`-wide field number `pos` (lowest first) of `val`, as a `work` integer."""
    return (_as(val, work) >> (_as(pos, work) * nbit)) & ((1 << nbit) - 1)


def _tir_packed_int_to_int_convert(storage_type="uint", storage_nbit=8):
    """Packed signed ints: field `pos` of `val`, sign-extended from `nbit` bits."""
    storage = f"{storage_type}{storage_nbit}"

    def f_convert(nbit: int, val, pos, dtype: str):
        _check(val, storage)
        x = _field(val, pos, nbit)
        return _as((x << (32 - nbit)) >> (32 - nbit), dtype)

    return f_convert


def _tir_packed_to_unsigned_convert(storage_type="uint", storage_nbit=8):
    """Packed unsigned ints: field `pos` of `val` as a non-negative number."""
    storage = f"{storage_type}{storage_nbit}"

    def f_convert(nbit: int, val, pos, dtype: str):
        _check(val, storage)
        return _as(_field(val, pos, nbit), dtype)

    return f_convert


def _tir_packed_to_signed_convert(storage_type="uint", storage_nbit=8):
    """Packed offset-binary ints: field `pos` minus 2**(nbit - 1)."""
    storage = f"{storage_type}{storage_nbit}"

    def f_convert(nbit: int, val, pos, dtype: str):
        _check(val, storage)
        return _as(_field(val, pos, nbit), dtype) - (1 << (nbit - 1))

    return f_convert


def _tir_packed_to_unsigned_convert_with_zeros(storage_type="uint", storage_nbit=8):
    """Packed unsigned ints with a zero point: field `pos` minus `zero`."""
    storage = f"{storage_type}{storage_nbit}"

    def f_convert(nbit: int, val, pos, zero, dtype: str):
        _check(val, storage)
        return _as(_field(val, pos, nbit) - zero, dtype)

    return f_convert


def _tir_packed_to_fp4_to_f16(storage_type="uint", storage_nbit=8):
    """TileLang's fp4 -> float16 (sign, 3 exponent bits, no mantissa; exponent 0 is 0)."""
    storage = f"{storage_type}{storage_nbit}"

    def f_convert(nbit: int, val, pos, dtype: str):
        _check(val, storage)
        f4 = _field(val, pos, nbit)
        e_f4 = f4 & 7
        bits = ((e_f4 | 8) | ((f4 >> 3) << 5)) << 10
        half = _tir.reinterpret("float16", _as(bits, "uint16"))
        return _tir.Select(e_f4 == 0, _tir.const(0, "float16"), half)

    return f_convert


def _tir_u8_to_f8_e4m3_to_f16(nbit: int, val, dtype: str):
    """TileLang's bit trick from an e4m3 byte to float16 (finite codes)."""
    v = _as(val, "int32")
    sign = (v >> 7) << 15
    e4 = v & 0x40
    rest = (((v & 63) << 7) | (e4 << 8) | (e4 << 7)) ^ 0x2000
    return _tir.reinterpret("float16", _as(sign | rest, "uint16"))


def _refuse(what: str):
    def f(*args, **kwargs):
        raise NotPortableError(
            f"not portable to the CPU reference: {what} (CUDA/HIP source for T.call_extern)",
            hint="use the plain converters (_tir_packed_int_to_int_convert and friends), "
                 "which TileLang also accepts, or the program's non-fast-decoding path")

    return f


get_lop3_intrin_group = _refuse("LOP3 decode intrinsics (tilelang.quantize.get_lop3_intrin_group)")
get_mxfp_intrin_group = _refuse("MXFP decode intrinsics (tilelang.quantize.get_mxfp_intrin_group)")

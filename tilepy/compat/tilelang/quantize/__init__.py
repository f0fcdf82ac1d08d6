"""`tilelang.quantize`: the bit-level converters TileLang programs call inside kernels to
unpack quantized storage (packed int4/int2 fields, fp4, fp8 e4m3), and the host-side weight
helpers. Each converter computes what TileLang's does on a GPU: the bit work in 32-bit
integers (C's integer promotion), then one cast to the requested dtype. Of the LOP3 / MXFP
intrinsic groups (CUDA source for `T.call_extern`), the helpers tilepy runs are handed out
by name (tilepy/frontend/externs.py); the others are refused as not portable.
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


def _descriptor(func_name: str) -> dict[str, str]:
    """What programs pass to T.import_source / T.call_extern: the helper's name and
    tilepy's stand-in source (tilepy/frontend/externs.py runs the helper by its name)."""
    from tilepy.frontend.externs import EXTERNS

    return {"func_name": func_name, "c_source": EXTERNS[func_name].source}


def _refuse(helper: str, which: str, have: str):
    raise NotPortableError(
        f"not portable to the CPU reference: {helper} ({which}), CUDA/HIP source for "
        f"T.call_extern that tilepy does not run", hint=f"tilepy runs {have}; or use the "
        "plain converters (_tir_packed_int_to_int_convert and friends) or the program's "
        "non-fast-decoding path")


def get_mxfp_intrin_group(out_dtype="bfloat16", source_format="uint", source_bit=4,
                          storage_dtype="uint8", use_twiddling=False, target=None):
    """TileLang's MXFP decode helper for (out_dtype, source_bit, use_twiddling): only
    decode_fp4_to_bf16_twiddling exists for CUDA; it runs here as the op fp4_twiddled."""
    out = {"float16": "f16", "bfloat16": "bf16"}.get(str(out_dtype))
    if out is None or str(source_format) not in ("int", "uint", "int32", "uint32") \
            or str(storage_dtype) not in ("int32", "int8", "uint8"):
        raise TileTypeError(f"get_mxfp_intrin_group: expected out_dtype float16/bfloat16, "
                            f"source_format int/uint, storage int32/int8/uint8; got "
                            f"{out_dtype}, {source_format}, {storage_dtype}")
    name = f"decode_fp{source_bit}_to_{out}" + ("_twiddling" if use_twiddling else "")
    if name != "decode_fp4_to_bf16_twiddling":
        _refuse(name, "tilelang.quantize.get_mxfp_intrin_group",
                "decode_fp4_to_bf16_twiddling (fp4, bfloat16, use_twiddling=True)")
    return _descriptor(name)


def get_lop3_intrin_group(out_dtype, source_format="uint", source_bit=4, storage_dtype="int8",
                          with_scaling=False, with_zeros=False, zeros_mode="original",
                          storage_scope="local"):
    """TileLang's LOP3 decode helper: decode_i4u_to_f16 / decode_i4s_to_f16 (4-bit ints to
    float16, no scaling or zeros) and decode_i2u_to_i8s / decode_i2s_to_i8s (2-bit ints to
    int8) run here; the others are refused."""
    if str(source_format) not in ("int", "uint", "int32", "uint32"):
        raise TileTypeError(f"get_lop3_intrin_group: expected source_format 'int' or 'uint'; "
                            f"got {source_format!r}")
    sign = "u" if str(source_format) in ("uint", "uint32") else "s"
    out = {"float16": "f16", "int8": "i8s", "int4": "i4s"}.get(str(out_dtype), str(out_dtype))
    name = f"decode_i{source_bit}{sign}_to_{out}" + ("_scale" if with_scaling else "") \
        + (f"_zeros_{zeros_mode}" if with_zeros else "") \
        + ("_offset" if storage_scope == "warp" and with_scaling else "")
    if name not in ("decode_i4u_to_f16", "decode_i4s_to_f16", "decode_i2u_to_i8s",
                    "decode_i2s_to_i8s"):
        _refuse(name, "tilelang.quantize.get_lop3_intrin_group",
                "decode_i4u_to_f16 and decode_i4s_to_f16 (4-bit to float16, no scaling), "
                "decode_i2u_to_i8s and decode_i2s_to_i8s (2-bit to int8)")
    return _descriptor(name)

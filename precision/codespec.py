"""Integer constants of a float format's bit codec, derived once from its table row.

Owns the facts every encoder and decoder needs (field widths, codes of the largest finite
value, of overflow and of NaN per sign) so the numpy and Numba codecs cannot disagree.
It converts no values itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from tilepy.precision.formats import Format, get_format

# How NaN is encoded (what ml_dtypes / numpy produce from a float32 NaN):
#   "quiet"    sign | exponent all ones | top mantissa bit (bfloat16, float8_e5m2)
#   "payload"  numpy float16: sign | 0x7c00 | top 10 payload bits (never 0: then 1)
#   "fixed"    one code per sign (float8_e4m3fn: S.1111.111; fnuz: 0x80; e8m0: 0xff)
#   "flipzero" formats with no NaN (fp6, fp4): ml_dtypes gives the zero of the opposite sign


@dataclass(frozen=True)
class CodeSpec:
    """Codec constants of one float format (all codes are unsigned storage integers)."""

    name: str
    bits: int
    exp_bits: int
    man_bits: int
    bias: int
    emin: int  # unbiased exponent of the smallest normal
    sign_bit: int  # 1 << (bits - 1), or 0 for unsigned formats
    max_code: int  # magnitude code of the largest finite value
    ovf_pos: int  # code of +overflow (and +inf) when not saturating
    ovf_neg: int
    nan_pos: int  # code of a NaN with the sign bit clear
    nan_neg: int
    nan_rule: str
    fnuz: bool  # negative zero is NaN (0x80): zero never carries a sign
    mask: int  # (1 << bits) - 1


def _nan_codes(f: Format, sign: int, max_code: int) -> tuple[int, int, str]:
    exp_ones = ((1 << f.exp_bits) - 1) << f.man_bits
    if f.nan == "ieee":
        q = exp_ones | (1 << (f.man_bits - 1))
        return q, sign | q, "payload" if f.name == "float16" else "quiet"
    if f.nan == "all_ones":
        return max_code + 1, sign | (max_code + 1), "fixed"
    if f.nan in ("neg_zero", "all_ones_code"):
        code = 0x80 if f.nan == "neg_zero" else 0xFF
        return code, code, "fixed"
    return sign, 0, "flipzero"


@lru_cache(maxsize=None)
def code_spec(fmt: str | Format) -> CodeSpec:
    """The codec constants of a float format named as in the table."""
    f = get_format(fmt)
    if not f.is_float or f.bits > 16:
        raise ValueError(f"{f.name} has no narrow float codec (only float formats of <= 16 bits)")
    sign = (1 << (f.bits - 1)) if f.has_sign else 0
    max_code = _max_code(f)
    nan_pos, nan_neg, rule = _nan_codes(f, sign, max_code)
    if f.has_inf:
        ovf_pos = ((1 << f.exp_bits) - 1) << f.man_bits
        ovf_neg = sign | ovf_pos
    elif f.nan == "none":
        ovf_pos, ovf_neg = max_code, sign | max_code
    else:
        ovf_pos, ovf_neg = nan_pos, nan_neg
    emin = -f.bias if f.name == "float8_e8m0fnu" else 1 - f.bias
    return CodeSpec(
        name=f.name, bits=f.bits, exp_bits=f.exp_bits, man_bits=f.man_bits, bias=f.bias,
        emin=emin, sign_bit=sign, max_code=max_code, ovf_pos=ovf_pos, ovf_neg=ovf_neg,
        nan_pos=nan_pos, nan_neg=nan_neg, nan_rule=rule, fnuz=f.nan == "neg_zero",
        mask=(1 << f.bits) - 1,
    )


def _max_code(f: Format) -> int:
    """Magnitude code of max_finite, from the field layout (not from ml_dtypes)."""
    top_exp = (1 << f.exp_bits) - 1
    man_ones = (1 << f.man_bits) - 1
    if f.has_inf:  # IEEE: the all-ones exponent is reserved
        return ((top_exp - 1) << f.man_bits) | man_ones
    if f.nan == "all_ones":  # S.1111.111 is NaN
        return (top_exp << f.man_bits) | (man_ones - 1)
    if f.nan == "all_ones_code":  # e8m0: 0xff is NaN
        return top_exp - 1
    return (top_exp << f.man_bits) | man_ones  # fnuz and the no-NaN formats

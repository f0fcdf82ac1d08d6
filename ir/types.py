"""IR dtypes (the rows of precision's format table), scopes, and the promotion rule.

A dtype is a `tilepy.precision.Format`; this module adds only what the IR needs on top:
buffer scopes, the compute dtype each format is evaluated in, and how two operand dtypes
promote. It defines no formats of its own.
"""

from __future__ import annotations

import enum

import numpy as np

from tilepy.precision.formats import FORMATS, Format, UnknownFormatError, get_format

DType = Format

bool_ = FORMATS["bool"]
int32 = FORMATS["int32"]
int64 = FORMATS["int64"]
float32 = FORMATS["float32"]
float64 = FORMATS["float64"]


def dtype(x: object) -> DType:
    """The IR dtype for a name ("bfloat16", "fp8_e4m3"...), numpy dtype or Format."""
    return get_format(x)


def is_dtype_name(x: object) -> bool:
    try:
        get_format(x)
    except (UnknownFormatError, TypeError):
        return False
    return True


class Scope(enum.Enum):
    """Where a buffer lives. Blocks share nothing but `GLOBAL`."""

    GLOBAL = "global"
    SHARED = "shared"
    FRAGMENT = "fragment"
    LOCAL = "local"
    VAR = "var"  # a scalar (shape ()), from T.alloc_var

    def __str__(self) -> str:
        return self.value


def compute_dtype(dt: DType) -> np.dtype:
    """The numpy dtype an expression of `dt` is evaluated in (numerics contract, rule 2).

    Floats narrower than 32 bits compute in float32 (and are rounded back after every op);
    float32/float64 are themselves; integers and bool are themselves, except the 4-bit
    integers, which compute in int8/uint8 and wrap on storing.
    """
    if dt.is_narrow_float:
        return np.dtype(np.float32)
    if dt.name == "int4":
        return np.dtype(np.int8)
    if dt.name == "uint4":
        return np.dtype(np.uint8)
    return dt.np_dtype


def promote(a: DType, b: DType) -> DType:
    """The dtype two differently typed operands are converted to before a binary op.

    - equal dtypes stay; bool promotes to the other operand;
    - float beats int; the wider float wins; two different floats of the same width
      (float16 vs bfloat16, e4m3 vs e5m2) meet in float32;
    - the wider integer wins; equal widths of different signedness give the signed one.
    """
    if a == b:
        return a
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.is_float and not b.is_float:
        return a
    if b.is_float and not a.is_float:
        return b
    if a.is_float:
        if a.bits != b.bits:
            return a if a.bits > b.bits else b
        return float32 if a.bits < 32 else a
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    return a if a.kind == "int" else b

"""The format table: every number format tilepy knows, with its bit layout and limits.

One row per format, named as ml_dtypes names it. The IR's dtypes are these rows (ir/types.py
re-exports them), so a format is described once. This module only describes formats; it
does not convert values (that is the codecs' job).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np


class UnknownFormatError(ValueError):
    """A format name that is not in the table; the message lists the known names."""


@dataclass(frozen=True)
class Format:
    """One number format. Compared and hashed by name; printed as its name."""

    name: str
    kind: str  # "bool", "int", "uint" or "float"
    bits: int
    exp_bits: int = 0
    man_bits: int = 0
    bias: int = 0
    has_inf: bool = False
    nan: str = "none"  # "ieee" (exp all ones, mantissa != 0), "all_ones" (S.1111.111),
    #                    "neg_zero" (the fnuz formats: 0x80 is NaN), "all_ones_code" (e8m0)
    has_sign: bool = True
    max_finite: float = field(default=0.0, compare=False)
    min_normal: float = field(default=0.0, compare=False)
    min_subnormal: float = field(default=0.0, compare=False)
    min_value: float = field(default=0.0, compare=False)  # most negative finite value

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Format) and other.name == self.name

    @property
    def np_dtype(self) -> np.dtype:
        """The numpy / ml_dtypes dtype that stores one value of this format."""
        return _NP[self.name]

    @property
    def storage(self) -> np.dtype:
        """The unsigned integer dtype of the same width (how Numba sees the bits)."""
        return np.dtype(f"uint{8 * self.np_dtype.itemsize}")

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def is_narrow_float(self) -> bool:
        """Floats narrower than 32 bits: arithmetic runs in float32, rounded per op."""
        return self.kind == "float" and self.bits < 32

    @property
    def itemsize(self) -> int:
        return self.np_dtype.itemsize

    @property
    def compute_dtype(self) -> np.dtype:
        """The dtype arithmetic on this format runs in: float32 for narrow floats."""
        return np.dtype(np.float32) if self.is_narrow_float else self.np_dtype


def _float_row(name: str, has_inf: bool, nan: str, has_sign: bool = True) -> Format:
    fi = ml_dtypes.finfo(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else np.finfo(name)
    nexp, nmant = int(fi.nexp), int(fi.nmant)
    bias = {"float8_e4m3fnuz": 8, "float8_e5m2fnuz": 16, "float8_e8m0fnu": 127}.get(
        name, (1 << (nexp - 1)) - 1
    )
    return Format(
        name=name, kind="float", bits=int(fi.bits), exp_bits=nexp, man_bits=nmant, bias=bias,
        has_inf=has_inf, nan=nan, has_sign=has_sign, max_finite=float(fi.max),
        min_normal=float(fi.smallest_normal), min_subnormal=float(fi.smallest_subnormal),
        min_value=-float(fi.max) if has_sign else 0.0,
    )


def _int_row(name: str, bits: int, signed: bool) -> Format:
    small = name in ("int4", "uint4")
    info = ml_dtypes.iinfo(getattr(ml_dtypes, name)) if small else np.iinfo(name)
    return Format(name=name, kind="int" if signed else "uint", bits=bits, has_sign=signed,
                  max_finite=float(info.max), min_value=float(info.min))


_ROWS = [
    Format(name="bool", kind="bool", bits=8, has_sign=False, max_finite=1.0),
    _int_row("int4", 4, True), _int_row("uint4", 4, False),
    _int_row("int8", 8, True), _int_row("int16", 16, True),
    _int_row("int32", 32, True), _int_row("int64", 64, True),
    _int_row("uint8", 8, False), _int_row("uint16", 16, False),
    _int_row("uint32", 32, False), _int_row("uint64", 64, False),
    _float_row("float16", True, "ieee"),
    _float_row("bfloat16", True, "ieee"),
    _float_row("float32", True, "ieee"),
    _float_row("float64", True, "ieee"),
    _float_row("float8_e4m3fn", False, "all_ones"),
    _float_row("float8_e5m2", True, "ieee"),
    _float_row("float8_e4m3fnuz", False, "neg_zero"),
    _float_row("float8_e5m2fnuz", False, "neg_zero"),
    _float_row("float8_e8m0fnu", False, "all_ones_code", has_sign=False),
    _float_row("float6_e2m3fn", False, "none"),
    _float_row("float6_e3m2fn", False, "none"),
    _float_row("float4_e2m1fn", False, "none"),
]

FORMATS: dict[str, Format] = {row.name: row for row in _ROWS}

_NP: dict[str, np.dtype] = {
    name: np.dtype(getattr(ml_dtypes, name) if hasattr(ml_dtypes, name) else name)
    for name in FORMATS
}

# Common spellings users type, mapped to table names.
ALIASES = {
    "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32",
    "fp32": "float32", "fp64": "float64", "double": "float64",
    "e4m3": "float8_e4m3fn", "float8_e4m3": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2", "fp8_e5m2": "float8_e5m2", "e8m0": "float8_e8m0fnu",
    "e2m1": "float4_e2m1fn", "fp4": "float4_e2m1fn", "float4_e2m1": "float4_e2m1fn",
    "e4m3_float8": "float8_e4m3fn", "e5m2_float8": "float8_e5m2",  # TileLang's older names
}


def get_format(x: object) -> Format:
    """The table row for a name, a numpy/ml_dtypes dtype or scalar type, or a Format."""
    if isinstance(x, Format):
        return x
    if isinstance(x, str):
        name = ALIASES.get(x, x)
    else:
        try:
            name = np.dtype(x).name  # type: ignore[arg-type]
        except TypeError:
            name = str(x)
    if name in FORMATS:
        return FORMATS[name]
    raise UnknownFormatError(
        f"unknown number format {x!r}; known formats: {', '.join(FORMATS)}"
    )


"""TileLang's dtype values: `T.float32` is the string "float32" (so `"float32" == T.float32`
and `getattr(torch, T.float32)` work) that the front end reads as that number format, and
`T.dtype(x)` builds one from a str, numpy, ml_dtypes or torch dtype. Decides no numerics:
the format table (tilepy.precision.formats) does.
"""

from __future__ import annotations

import numpy as np

from tilepy.ir.errors import TileTypeError
from tilepy.precision.formats import FORMATS, Format, UnknownFormatError, get_format

# torch's names where they differ from the format table's (torch has no fp4 or int4 dtype:
# TileLang passes int4 data as int8 storage)
_TORCH = {"float4_e2m1fn": "uint8", "int4": "int8", "uint4": "uint8",
          "float8_e8m0fnu": "uint8"}


def _name(x) -> str:
    if isinstance(x, Format):
        return x.name
    text = str(x)
    if text.startswith("torch."):  # a torch dtype, without importing torch
        text = text[len("torch."):]
        if text in ("float", "double", "half", "long", "int", "short"):
            text = {"float": "float32", "double": "float64", "half": "float16",
                    "long": "int64", "int": "int32", "short": "int16"}[text]
    elif not isinstance(x, str):
        return get_format(np.dtype(x)).name
    return get_format(text).name


class dtype(str):  # noqa: N801 - TileLang's name
    """A number format under its name: `T.dtype("bf16") == "bfloat16"`."""

    def __new__(cls, x="float32"):
        try:
            return str.__new__(cls, _name(x))
        except (UnknownFormatError, TypeError):
            raise TileTypeError(f"T.dtype: unknown dtype {x!r}: expected a name such as "
                                f"'float16', or a numpy, ml_dtypes or torch dtype",
                                hint=f"known: {', '.join(FORMATS)}") from None

    @property
    def format(self) -> Format:
        return get_format(str(self))

    @property
    def bits(self) -> int:
        return self.format.bits

    @property
    def itemsize(self) -> int:
        return self.format.itemsize

    def as_numpy(self) -> np.dtype:
        """The numpy / ml_dtypes dtype of arrays of this format."""
        return np.dtype(self.format.np_dtype)

    def as_torch(self):
        """The torch dtype (int4 and fp4 as their 8-bit storage); needs torch."""
        import torch

        return getattr(torch, _TORCH.get(str(self), str(self)))

    def __call__(self, value=0):
        """Outside a kernel: the value as a numpy scalar of this format (inside a kernel
        the front end reads `T.float32(x)` as a cast)."""
        return self.as_numpy().type(value)

    def __getattr__(self, attr: str):
        """The IR dtype's other attributes (name, is_float, np_dtype...), so `A.dtype` in
        a kernel offers both TileLang's string and tilepy's dtype."""
        if attr.startswith("_"):
            raise AttributeError(attr)
        from tilepy.ir.types import dtype as ir_dtype

        return getattr(ir_dtype(str(self)), attr)

    def __repr__(self) -> str:
        return f"T.{str(self)}" if str(self).isidentifier() else f"T.dtype({str(self)!r})"


def as_format(v) -> Format | None:
    """The Format a build-time value names (a Format or a dtype), else None."""
    if isinstance(v, Format):
        return v
    return v.format if isinstance(v, dtype) else None

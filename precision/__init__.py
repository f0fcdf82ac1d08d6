"""tilepy.precision: number formats and their numerics; the lowest layer.

Owns the format table (the single source of dtypes for the IR), rounding and saturation,
codecs, block scaling and mixed-precision policies. Depends on numpy and ml_dtypes only
(Numba lazily); never imports another tilepy layer.
"""

from tilepy.precision.formats import FORMATS, Format, UnknownFormatError, get_format

__all__ = ["FORMATS", "Format", "UnknownFormatError", "get_format"]

"""tilepy.precision: number formats and their numerics; the lowest layer.

Owns the format table (the single source of dtypes for the IR), rounding and saturation,
codecs, block scaling and mixed-precision policies. Depends on numpy and ml_dtypes only
(Numba lazily, in `tilepy.precision.codecs`); never imports another tilepy layer.
"""

from tilepy.precision.blocks import SCHEMES, Quantized, dequantize, quantize
from tilepy.precision.formats import FORMATS, Format, UnknownFormatError, get_format
from tilepy.precision.gemm import ACCUMULATION, scaled_gemm
from tilepy.precision.packing import pack, pack_nibbles, unpack, unpack_nibbles
from tilepy.precision.rounding import (
    cast,
    compute_dtype,
    decode,
    encode,
    random_bits,
    round_to,
    stochastic_round,
)

__all__ = [
    "SCHEMES", "Quantized", "dequantize", "quantize", "ACCUMULATION", "scaled_gemm",
    "FORMATS", "Format", "UnknownFormatError", "get_format",
    "cast", "compute_dtype", "decode", "encode", "random_bits", "round_to",
    "stochastic_round", "pack", "pack_nibbles", "unpack", "unpack_nibbles",
]

"""tilepy.precision: number formats and their numerics; the lowest layer (docs/precision.md).

Owns the format table (the IR's dtypes), rounding and saturation, codecs, block scaling,
mixed-precision policies and scaling. Imports numpy and ml_dtypes (Numba only in its Numba
modules: codecs, codecs64, blocks_jit, gemm_jit, numba_target) and no other tilepy layer.
"""

from tilepy.precision.blocks import SCHEMES, Quantized, dequantize, quantize
from tilepy.precision.formats import FORMATS, Format, UnknownFormatError, get_format
from tilepy.precision.gemm import ACCUMULATION, scaled_gemm
from tilepy.precision.packing import pack, pack_nibbles, unpack, unpack_nibbles
from tilepy.precision.policy import Policy, PolicyTable, autocast, current_policy
from tilepy.precision.rounding import (
    cast,
    compute_dtype,
    decode,
    encode,
    random_bits,
    round_to,
    stochastic_round,
)
from tilepy.precision.scaling import DelayedScaling, DynamicLossScaler, current_scaling
from tilepy.precision.switching import PrecisionController, SwitchConfig, range_stats

__all__ = [
    "SCHEMES", "Quantized", "dequantize", "quantize", "ACCUMULATION", "scaled_gemm",
    "FORMATS", "Format", "UnknownFormatError", "get_format",
    "cast", "compute_dtype", "decode", "encode", "random_bits", "round_to",
    "stochastic_round", "pack", "pack_nibbles", "unpack", "unpack_nibbles",
    "Policy", "PolicyTable", "autocast", "current_policy",
    "DelayedScaling", "DynamicLossScaler", "current_scaling",
    "PrecisionController", "SwitchConfig", "range_stats",
]

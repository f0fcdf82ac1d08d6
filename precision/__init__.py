"""tilepy.precision: number formats and their numerics; the lowest layer.

Owns the format table (the single source of dtypes for the IR), rounding and saturation,
codecs, block scaling and mixed-precision policies. Depends on numpy and ml_dtypes only
(Numba lazily: codecs, codecs64, blocks_jit, gemm_jit); never imports another tilepy layer.
See docs/precision.md.
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

"""Bit casts between floats and integers inside njit code (LLVM bitcasts): float32 <->
uint32 and float64 <-> uint64. A small module of its own so that kernels needing only these
(every JIT kernel's helpers) do not import the codecs; codecs.py and codecs64.py re-export
them. Imports numba.
"""

from __future__ import annotations

from llvmlite import ir as llvm_ir
from numba import types
from numba.extending import intrinsic

from tilepy.precision.numba_target import configure_target

# before Numba's first compile in this process: vector width (numba_target.py); what
# compiles calls configure() too (codecs.py, jit/compiler.py)
configure_target()


@intrinsic
def f32_bits(typingctx, x):
    """Bit pattern (uint32) of a float32, inside njit code."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], llvm_ir.IntType(32))

    return types.uint32(types.float32), codegen


@intrinsic
def bits_f32(typingctx, b):
    """float32 whose bit pattern is the low 32 bits of an integer, inside njit code."""
    if not isinstance(b, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        v = args[0]
        if b.bitwidth > 32:
            v = builder.trunc(v, llvm_ir.IntType(32))
        return builder.bitcast(v, llvm_ir.FloatType())

    return types.float32(b), codegen


@intrinsic
def f64_bits(typingctx, x):
    """Bit pattern (uint64) of a float64, inside njit code."""
    if x != types.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], llvm_ir.IntType(64))

    return types.uint64(types.float64), codegen


@intrinsic
def bits_f64(typingctx, b):
    """float64 with the given 64-bit pattern, inside njit code."""
    if not isinstance(b, types.Integer) or b.bitwidth != 64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], llvm_ir.DoubleType())

    return types.float64(b), codegen

"""tilepy.ir: the tile IR: types, buffers, expressions, statements, the op table, verifier,
printer, parser, structural hashing and analyses (counts). Pure data and functions over it:
it holds no transformation passes (the JIT's live in jit/) and never executes a kernel.
"""

# the tools over the IR (imported after the node types they use)
from tilepy.ir.analysis import Counts, count  # noqa: E402
from tilepy.ir.expr import Buffer, Call, Const, Expr, Load, Region, Var, full_region
from tilepy.ir.hashing import structural_hash  # noqa: E402
from tilepy.ir.ops import OPS, Compute, Op, OpDef
from tilepy.ir.parser import parse  # noqa: E402
from tilepy.ir.printer import format_expr, format_func  # noqa: E402
from tilepy.ir.stmt import (
    Alloc,
    Assert,
    AtomicAdd,
    Breakpoint,
    Copy,
    Cumsum,
    Fill,
    For,
    ForKind,
    Gemm,
    If,
    Launch,
    Let,
    PrimFunc,
    Print,
    Reduce,
    ReduceKind,
    Stmt,
    Store,
    While,
    walk,
)
from tilepy.ir.types import DType, Scope, compute_dtype, dtype, promote
from tilepy.ir.verify import verify  # noqa: E402

__all__ = [
    "Alloc", "Assert", "AtomicAdd", "Breakpoint", "Buffer", "Call", "Compute", "Const", "Copy",
    "Cumsum",
    "DType", "Expr", "Fill", "For", "ForKind", "Gemm", "If", "Launch", "Let", "Load", "OPS",
    "Op", "OpDef", "PrimFunc", "Print", "Reduce", "ReduceKind", "Region", "Scope", "Stmt",
    "Store", "Var", "While", "compute_dtype", "dtype", "full_region", "promote", "walk",
    "Counts", "count", "format_expr", "format_func", "parse", "structural_hash", "verify",
]

"""The opt-in fast mode (`fast=True`): what it may do that the exact path never does.

Owns the Numba flags of fast kernels (fast-math: FMA contraction, reassociation) and the
BLAS form of `T.gemm` on whole float32/float64 block-local tiles. Results are checked
against the interpreter with derived error bounds, never bitwise. The exact path must not
import from this module except through `options()` and `emit_dot()` behind `fast`.
"""

from __future__ import annotations

from tilepy.ir.expr import Const, Region
from tilepy.ir.stmt import Gemm
from tilepy.ir.types import compute_dtype
from tilepy.jit.scalars import Emitter
from tilepy.jit.source import Writer


def options() -> dict:
    """Extra njit options of fast kernels."""
    return {"fastmath": True}


def _whole(em: Emitter, r: Region) -> bool:
    """A whole 2-d block-local tile (so it can be handed to BLAS as it is)."""
    b = r.buffer
    if b.ndim != 2 or em.ref(b).kind != "array":
        return False
    zero = all(isinstance(s, Const) and int(s.value) == 0 for s in r.starts)
    return zero and tuple(r.extents) == tuple(b.shape)


def emit_dot(em: Emitter, w: Writer, s: Gemm) -> bool:
    """`C += op(A) @ op(B)` as one np.dot (BLAS) when the tiles allow; False otherwise."""
    dt = s.c.dtype
    if dt.name not in ("float32", "float64") or not all(_whole(em, r) for r in (s.a, s.b, s.c)):
        return False
    # narrow-float tiles are held as float32 on their grid (lower.py), so BLAS takes them
    if any(compute_dtype(r.dtype) != compute_dtype(dt) for r in (s.a, s.b)):
        return False
    a, b, c = (em.ref(r.buffer).name for r in (s.a, s.b, s.c))
    a = f"{a}.T" if s.transpose_a else a
    b = f"{b}.T" if s.transpose_b else b
    w.line("# fast mode: BLAS, other summation order (checked with error bounds)")
    if s.clear_accum:
        w.line(f"{c}[:, :] = np.dot({a}, {b})")
    else:
        w.line(f"{c} += np.dot({a}, {b})")
    return True

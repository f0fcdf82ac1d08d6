"""The opt-in fast mode (`fast=True`): what it may do that the exact path never does.
Owns fast kernels' Numba flags (`options`: fast-math), helpers (`namespace`: BLAS, float32
exp/exp2 within 2 ulp, which the op table's `fast` forms call) and gemm emitters
(`emit_launch`: a launch kloop.py proves one product, one BLAS call per panel over Numba's
threads; `emit_dot`: a T.gemm on whole local tiles). Checked against the
interpreter with derived bounds, never bitwise; exact code reaches it only behind `fast`.
"""

from __future__ import annotations

from functools import lru_cache

from tilepy.ir.expr import Const, Region
from tilepy.ir.stmt import Gemm, Launch
from tilepy.ir.types import compute_dtype
from tilepy.jit.kloop import KLoop, LaunchGemm, Operand, match_launch
from tilepy.jit.scalars import Emitter
from tilepy.jit.source import Writer

# an Emitter note: BLAS is called on Numba's threads (in blocks, or a product's panels), so
# the loader runs BLAS single-threaded
BLAS_IN_BLOCKS = "blas in blocks"


def options() -> dict:
    """Extra njit options of fast kernels."""
    return {"fastmath": True}


def namespace(tier: str) -> dict:
    """The helpers fast kernels call, for the loader of a tier."""
    from tilepy.jit import blas
    from tilepy.jit.mathlib import fast_numba_math, fast_py_math

    if tier == "py":
        return {"_gemm_acc": blas.py_gemm_acc, "_gemm_par": blas.py_gemm_par,
                "_fextreme": _py_fextreme, **fast_py_math()}
    return {"_gemm_acc": blas.numba_gemm_acc(), "_gemm_par": blas.numba_gemm_par(),
            "_fextreme": _numba_fextreme(),
            **fast_numba_math()}


def _py_fextreme(v, init, want_max):
    """The py tier's `_fextreme`: numpy's max or min of the row and init."""
    if v.shape[0] == 0:
        return init
    r = v.max() if want_max else v.min()
    return type(init)(max(init, r) if want_max else min(init, r))


@lru_cache(maxsize=None)
def _numba_fextreme():
    """A float row's max (want_max) or min, folded with init, as one integer max or min
    over runtime.py's order keys, which LLVM vectorises: half the work of the exact path's
    `_extreme`, which also keeps the serial fold's answer for NaNs and zeros. Here a NaN
    may or may not win (fast mode assumes none) and -0 < +0."""
    import numba

    from tilepy.jit.runtime import _key_float, _numba_helpers, _order_key

    _numba_helpers()  # the key intrinsics' overloads

    @numba.njit(fastmath=False)  # integer folds: no flag changes them (runtime._EXACT)
    def fextreme(v, init, want_max):
        k = _order_key(init)
        if want_max:
            for i in range(v.shape[0]):
                x = _order_key(v[i])
                k = x if x > k else k
        else:
            for i in range(v.shape[0]):
                x = _order_key(v[i])
                k = x if x < k else k
        return _key_float(k, init)

    return fextreme


def _whole(em: Emitter, r: Region) -> bool:
    """A whole 2-d block-local tile (so it can be handed to BLAS as it is)."""
    b = r.buffer
    if b.ndim != 2 or em.ref(b).kind != "array":
        return False
    zero = all(isinstance(s, Const) and int(s.value) == 0 for s in r.starts)
    return zero and tuple(r.extents) == tuple(b.shape)


def emit_dot(em: Emitter, w: Writer, s: Gemm) -> bool:
    """`C += op(A) @ op(B)` as one BLAS call when the tiles are whole float32/float64
    block-local tiles, inside the block loop (where BLAS runs single-threaded:
    blas.one_thread); False otherwise."""
    dt = s.c.dtype
    if dt.name not in ("float32", "float64") or not all(_whole(em, r) for r in (s.a, s.b, s.c)):
        return False
    # narrow-float tiles are held as float32 on their grid (lower.py), so BLAS takes them
    if any(compute_dtype(r.dtype) != compute_dtype(dt) for r in (s.a, s.b)):
        return False
    a, b, c = (em.ref(r.buffer).name for r in (s.a, s.b, s.c))
    em.notes.add(BLAS_IN_BLOCKS)
    w.line("# fast mode: BLAS, other summation order (checked with error bounds)")
    beta = "0.0" if s.clear_accum else "1.0"
    w.line(f"_gemm_acc({a}, {b}, {c}, {s.transpose_a}, {s.transpose_b}, {beta})")
    return True


# ------------------------------------------------------------------ operands of a product


def _globals_ok(em: Emitter, *ops: Operand, narrow: bool = False) -> bool:
    """Operands the JIT holds as plain arrays of their dtype (no storage codec), or with
    `narrow`, also floats of <= 16 bits held as storage codes (decoded to float32 before
    the product, exact: faster than the per-tile path's decode and small BLAS calls,
    docs/perf-log.md)."""
    def ok(o: Operand) -> bool:
        r, dt = em.ref(o.region.buffer), o.region.buffer.dtype
        return r.kind == "global" and (r.codec is None or (narrow and dt.is_float
                                                          and dt.bits <= 16))
    return all(ok(o) for o in ops)


def _k_range(em: Emitter, w: Writer, kl: KLoop, n: str) -> tuple[str, str, str, str]:
    """Offsets of A's and B's K slices and the range [tlo, thi) of steps' K positions
    (0 .. n * bk) inside both: outside, one side reads zeros (copies zero-fill), so those
    terms add nothing."""
    ka, kb, tlo, thi = (em.names.temp(h) for h in ("ka", "kb", "tlo", "thi"))
    A, B = (em.ref(o.region.buffer).name for o in (kl.a, kl.b))
    w.line(f"{ka} = np.int64({em.expr(kl.a.koff)})")
    w.line(f"{kb} = np.int64({em.expr(kl.b.koff)})")
    w.line(f"{tlo} = max(0, -{ka}, -{kb})")
    w.line(f"{thi} = min({n} * {kl.bk}, {A}.shape[{kl.a.kdim}] - {ka}, "
           f"{B}.shape[{kl.b.kdim}] - {kb})")
    return ka, kb, tlo, thi


def _leads(em: Emitter, op: Operand) -> tuple[list[str], list[str]]:
    """The leading unit dims' indices and their in-range conditions."""
    g = em.ref(op.region.buffer).name
    idx = [em.expr(e) for e in op.lead]
    return idx, [f"0 <= {x} < {g}.shape[{d}]" for d, x in enumerate(idx)]


def _view(em: Emitter, op: Operand, lead: list[str], k: tuple[str, str],
          o: tuple[str, str]) -> str:
    """The operand's global slice: K positions [k0, k1), the other dim [o0, o1)."""
    sl = [""] * 2
    sl[op.kdim - len(lead)] = f"{k[0]}:{k[1]}"
    sl[op.odim - len(lead)] = f"{o[0]}:{o[1]}"
    return f"{em.ref(op.region.buffer).name}[{', '.join(lead + sl)}]"


def _decoded(em: Emitter, w: Writer, pairs: list[tuple[Operand, str]]) -> list[str]:
    """The operands' views, each narrow float one decoded to a float32 array (exact). When
    both are narrow, one parallel loop runs over the rows of both: one start of the thread
    pool instead of two, and one loop less to compile."""
    out = [v for _, v in pairs]
    todo = [n for n, (op, _) in enumerate(pairs) if em.ref(op.region.buffer).codec is not None]
    srcs = []
    for n in todo:
        src, out[n] = em.names.temp("src"), em.names.temp("f32")
        srcs.append(src)
        w.line(f"{src} = {pairs[n][1]}")
        w.line(f"{out[n]} = np.empty(({src}.shape[0], {src}.shape[1]), np.float32)")
    if not todo:
        return out
    i = em.names.temp("i")
    w.line(f"for {i} in prange({' + '.join(f'{s}.shape[0]' for s in srcs)}):")
    with w.indent():
        if len(todo) == 1:
            _decode_row(em, w, pairs[todo[0]][0], srcs[0], out[todo[0]], i)
            return out
        w.line(f"if {i} < {srcs[0]}.shape[0]:")
        with w.indent():
            _decode_row(em, w, pairs[todo[0]][0], srcs[0], out[todo[0]], i)
        w.line("else:")
        with w.indent():
            r = em.names.temp("r")
            w.line(f"{r} = {i} - {srcs[0]}.shape[0]")
            _decode_row(em, w, pairs[todo[1]][0], srcs[1], out[todo[1]], r)
    return out


def _decode_row(em: Emitter, w: Writer, op: Operand, src: str, dst: str, row: str) -> None:
    j = em.names.temp("j")
    w.line(f"for {j} in range({src}.shape[1]):")
    w.line(f"    {dst}[{row}, {j}] = {em.decode(f'{src}[{row}, {j}]', op.region.buffer.dtype)}")


# ------------------------------------------------------------------ whole launches


def emit_launch(em: Emitter, w: Writer, s: Launch) -> bool:
    """A launch that jit/kloop.py proves one product of whole matrices, as BLAS calls from
    the kernel's entry instead of the block loop: one per panel of the product, over
    Numba's threads (blas.numba_gemm_par), each single-threaded."""
    lg = match_launch(s)
    if lg is None or not _globals_ok(em, lg.kloop.a, lg.kloop.b, narrow=True):
        return False
    cref = em.ref(lg.out.dst.buffer)
    if cref.kind != "global" or cref.codec is not None:
        return False
    w.comment("fast mode: this launch is one matrix product: BLAS calls on panels, one "
              "per thread", s.loc)
    grid = [em.names.temp("g") for _ in s.grid]
    for g, e in zip(grid, s.grid):
        w.line(f"{g} = np.int64({em.expr(e)})")
    w.line(f"if {' and '.join(f'{g} > 0' for g in grid)}:")
    with w.indent():
        _whole_product(em, w, lg, grid)
    return True


def _whole_product(em: Emitter, w: Writer, lg: LaunchGemm, grid: list[str]) -> None:
    """C[:mc, :nc] (what the blocks write) = A[:ma] @ B[:, :nb], zeros where A's rows or
    B's columns end first (the blocks' copies read zeros there)."""
    kl = lg.kloop
    bm, bn = kl.gemm.c.buffer.static_shape()
    C = em.ref(lg.out.dst.buffer).name
    nd = lg.out.dst.buffer.ndim
    lead = [em.expr(e) for e in lg.out.dst.starts[:-2]]
    n, mc, nc, ma, nb, cv = (em.names.temp(h) for h in ("n", "mc", "nc", "ma", "nb", "cv"))
    w.line(f"{mc} = min({grid[lg.grid_row]} * {bm}, {C}.shape[{nd - 2}])")
    w.line(f"{nc} = min({grid[lg.grid_col]} * {bn}, {C}.shape[{nd - 1}])")
    inside = [f"0 <= {x} < {C}.shape[{d}]" for d, x in enumerate(lead)]
    w.line(f"if {' and '.join(inside + [f'{mc} > 0', f'{nc} > 0'])}:")
    w.depth += 1
    w.line(f"{cv} = {C}[{', '.join(lead + [f'0:{mc}', f'0:{nc}'])}]")
    w.line(f"{n} = np.int64({em.expr(kl.loop.stop)})")
    ka, kb, tlo, thi = _k_range(em, w, kl, n)
    A, B = (em.ref(o.region.buffer).name for o in (kl.a, kl.b))
    w.line(f"{ma} = min({mc}, {A}.shape[{kl.a.odim}])")
    w.line(f"{nb} = min({nc}, {B}.shape[{kl.b.odim}])")
    (la, ca), (lb, cb) = _leads(em, kl.a), _leads(em, kl.b)
    zero = em.zero(lg.out.dst.dtype)
    w.line(f"if not ({' and '.join([f'{tlo} < {thi}', f'{ma} > 0', f'{nb} > 0'] + ca + cb)}):")
    w.line(f"    {cv}[:, :] = {zero}")
    w.line("else:")
    w.line(f"    if {ma} < {mc} or {nb} < {nc}:")
    w.line(f"        {cv}[:, :] = {zero}")
    av = _view(em, kl.a, la, (f"{ka} + {tlo}", f"{ka} + {thi}"), ("0", ma))
    bv = _view(em, kl.b, lb, (f"{kb} + {tlo}", f"{kb} + {thi}"), ("0", nb))
    w.depth += 1
    av, bv = _decoded(em, w, [(kl.a, av), (kl.b, bv)])
    w.depth -= 1
    em.notes.add(BLAS_IN_BLOCKS)  # panels on Numba's threads, BLAS single-threaded
    w.line(f"    _gemm_par({av}, {bv}, {cv}[:{ma}, :{nb}], {kl.gemm.transpose_a}, "
           f"{kl.gemm.transpose_b}, 0.0 if ({ma} == {mc} and {nb} == {nc}) else 1.0)")
    w.depth -= 1

"""The interpreter's entry point: run a PrimFunc's launches on numpy arrays, in place.

Owns the block schedule: blocks run in batches (block variables become arrays, local
buffers get a leading batch axis) unless the kernel needs one block at a time (atomics,
print/breakpoint, tracing, random order). Batching never changes a result.
"""

from __future__ import annotations

import numpy as np

from tilepy.interpreter.control import run_body
from tilepy.interpreter.evaluate import evaluate
from tilepy.interpreter.state import Ctx, Shared
from tilepy.ir import stmt as S
from tilepy.ir.errors import ArgumentError, LoweringError, TilepyError
from tilepy.ir.expr import Const
from tilepy.ir.types import Scope, compute_dtype

# Elements per batch that one block may use (locals + parallel lanes): bounds memory.
BATCH_ELEMENTS = 1 << 22


def run(func: S.PrimFunc, arrays: dict, sizes: dict, *, sanitize: bool = True,
        random_order: bool = False, seed: int | None = None, batch: bool = True,
        trace=None, strict: bool = False, masked=None) -> None:
    """Execute `func` on `arrays` (param name -> C-contiguous array of the buffer's dtype
    and shape; outputs are written in place) with symbolic `sizes` (name -> int).

    sanitize: check uninitialised reads of block-local memory and cross-block races
    (bounds of block-local buffers are always checked). strict: out-of-range global
    element accesses raise OutOfBoundsError (otherwise loads give the buffer's safe value
    and stores are skipped, TileLang's rule), and with sanitize, so do reads of fragment
    elements nothing wrote (otherwise a fresh fragment reads as zero, as on the JIT).
    masked: a MaskReport that records the masked accesses. random_order: run blocks one
    at a time in an order drawn from `seed`. batch=False: one block at a time in block
    order. trace: a Listener.
    """
    _check_arrays(func, arrays, sizes)
    shared = Shared(func, dict(arrays), dict(sizes), sanitize, trace,
                    bool(strict), masked)
    host = Ctx(shared, (1,), np.zeros(1, dtype=np.int64))
    for v in func.sizes:
        if v.name in sizes:
            host.env[v.name] = np.asarray(sizes[v.name], dtype=compute_dtype(v.dtype))
    rng = np.random.default_rng(seed) if random_order else None
    for s in func.body:
        host.loc = s.loc
        if isinstance(s, S.Launch):
            _launch(shared, host, s, rng, batch)
        elif isinstance(s, S.Let):
            host.env[s.var.name] = evaluate(host, s.value, None)
        else:
            raise LoweringError(
                f"'{type(s).__name__}' outside T.Kernel: expected only launches and "
                f"assignments at the top of a kernel", loc=s.loc,
                hint="move the statement inside a `with T.Kernel(...)` block")


def _check_arrays(func: S.PrimFunc, arrays: dict, sizes: dict) -> None:
    missing = [p.name for p in func.params if p.name not in arrays]
    if missing:
        raise ArgumentError(
            f"kernel '{func.name}' cannot run: expected an array for every parameter; got "
            f"none for {', '.join(missing)}", loc=func.loc,
            hint="pass every input and output array (outputs are written in place)")
    for p in func.params:  # the ground truth refuses what it would otherwise reinterpret
        got = getattr(arrays[p.name], "dtype", None)
        if got != p.dtype.np_dtype:
            raise ArgumentError(
                f"kernel '{func.name}': argument {p.name} expected dtype {p.dtype}; got "
                f"{got if got is not None else type(arrays[p.name]).__name__}", loc=func.loc,
                hint="convert the array to the parameter's dtype before the launch")


def _launch(shared: Shared, host: Ctx, s: S.Launch, rng, batch: bool) -> None:
    grid = tuple(host.host_value(g) for g in s.grid)
    nblocks = int(np.prod(grid)) if grid else 1
    shared.writers = {}  # launches are ordered: races are within one launch
    if shared.listener is not None:
        shared.listener.on_launch(shared.func.name, grid)
    order = np.arange(nblocks, dtype=np.int64)
    if rng is not None:
        order = rng.permutation(order)
    one_at_a_time = not batch or rng is not None or shared.listener is not None \
        or _needs_order(s.body)
    size = 1 if one_at_a_time else _batch_size(host, s.body)
    for lo in range(0, nblocks, size):
        _run_batch(shared, host, s, grid, order[lo:lo + size])


def _run_batch(shared: Shared, host: Ctx, s: S.Launch, grid, lin: np.ndarray) -> None:
    ctx = Ctx(shared, grid, lin)
    ctx.env.update(host.env)
    rest = lin
    for var, g in zip(s.block_vars, grid):
        ctx.env[var.name] = (rest % g).astype(compute_dtype(var.dtype))
        rest = rest // g
    if shared.listener is not None:
        shared.listener.on_block(ctx.block_coords(int(lin[0])))
    run_body(ctx, s.body, None)


def _needs_order(body) -> bool:
    """Statements whose effects are ordered across blocks (atomic adds to global memory; an
    atomic add to shared or local memory stays in its block), or seen by the user."""
    return any(isinstance(x, (S.Print, S.Breakpoint)) or isinstance(x, S.AtomicAdd)
               and x.dst.buffer.root.scope is Scope.GLOBAL for x in S.walk(body))


def _batch_size(host: Ctx, body) -> int:
    per_block = 1 + _elements(host, body)
    return max(1, BATCH_ELEMENTS // per_block)


def _elements(host: Ctx, body, lanes: int = 1) -> int:
    """A bound on the elements one block holds at once: its buffers and lane arrays."""
    total = 0
    for s in body:
        if isinstance(s, S.Alloc):
            total += int(np.prod([_static(host, e) for e in s.buffer.shape]))
        elif isinstance(s, S.For):
            inner = lanes
            if s.kind is S.ForKind.PARALLEL:
                inner = lanes * max(1, _static(host, s.stop) - _static(host, s.start, 0))
            total += max(inner, _elements(host, s.body, inner))
        elif isinstance(s, (S.If, S.Versioned)):
            total += max(_elements(host, b, lanes) for b in S.branches(s))
        elif isinstance(s, S.While):
            total += _elements(host, s.body, lanes)
    return total


def _static(host: Ctx, e, default: int = 1024) -> int:
    """The value of a size expression when it is known before the launch, else `default`."""
    if isinstance(e, Const):
        return int(e.value)
    try:
        return int(np.asarray(evaluate(host, e, None)).reshape(-1)[0])
    except TilepyError:  # depends on a block or loop variable: use the default bound
        return default

"""The JIT's IR-to-IR passes, in the order they run (`PIPELINE`).

Each pass is a function `PrimFunc -> PrimFunc` that keeps every value the program computes
and leaves IR the verifier accepts; the interpreter runs the IR after any prefix of the
pipeline, which is how the tests check that no pass changes a bit. `jit/lower.py`
transcribes what the last pass leaves. `kernel.ir_after(name)` shows a snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tilepy.ir.errors import ArgumentError
from tilepy.ir.stmt import PrimFunc
from tilepy.jit.passes import fusion, guards, hoist, initfill, versioning


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[PrimFunc], PrimFunc]
    doc: str
    fuse_only: bool = False  # runs only with row fusion (fast mode's default)


# initfill runs first: its proofs are about the tile ops as written, and they hold for
# the fused rows too (a fused run keeps every store that is read afterwards).
PIPELINE: tuple[Pass, ...] = (
    Pass("initfill", initfill.run, "block-local arrays written whole before any read "
         "are marked zero_fill=False"),
    Pass("fusion", fusion.run, "a block's row-wise tile statements as one loop over rows, "
         "versioned on its arrays' extents", fuse_only=True),
    Pass("hoist", hoist.run, "loop-invariant element loads read once before their loop"),
    Pass("guards", guards.run, "a loop whose body is one `if` on its variable runs the "
         "if's range"),
    Pass("versioning", versioning.run, "an outermost T.Parallel nest whose global indices "
         "can be bounded runs unchecked where the bounds lie inside the arrays"),
)
NAMES = tuple(p.name for p in PIPELINE)


def run(func: PrimFunc, fuse: bool = False, upto: str | None = None) -> PrimFunc:
    """`func` after the pipeline, or after its passes up to and including `upto`."""
    return snapshots(func, fuse, upto)[-1][1]


def snapshots(func: PrimFunc, fuse: bool = False,
              upto: str | None = None) -> list[tuple[str, PrimFunc]]:
    """[("input", func), (pass name, func after it), ...] through `upto` (all by default);
    a pass that does not run (fusion without `fuse`) leaves the IR as it was."""
    if upto is not None and upto not in NAMES:
        raise ArgumentError(f"no JIT pass named {upto!r}; expected one of "
                            f"{', '.join(NAMES)}")
    out = [("input", func)]
    for p in PIPELINE:
        if fuse or not p.fuse_only:
            func = p.run(func)
        out.append((p.name, func))
        if p.name == upto:
            break
    return out

"""Reduction operators (sum, max, min, prod) and how one pairwise combine is computed.

`combine(a, b, op)` is the only place where two ranks' values meet, so the numerics of
every collective are defined here: one IEEE operation per element in the arrays' dtype
(narrow floats computed in float32 and rounded once, as ml_dtypes does), integers wrap.
"""

from __future__ import annotations

import numpy as np

from tilepy.parallel.errors import CommArgumentError

_UFUNCS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}
OPS = tuple(_UFUNCS)


def check_op(op: str) -> str:
    """Return `op` if it is a known reduction, else raise with the known names."""
    if op not in _UFUNCS:
        raise CommArgumentError(
            f"unknown reduction op {op!r}", hint=f"use one of {', '.join(OPS)}"
        )
    return op


def combine(a: np.ndarray, b: np.ndarray, op: str, out: np.ndarray | None = None) -> np.ndarray:
    """`a op b` elementwise, `a` on the left. Returns a new array unless `out` is given."""
    return _UFUNCS[op](a, b, out=out)


def reduce_list(xs: list[np.ndarray], op: str) -> np.ndarray:
    """Left-to-right fold ((x0 op x1) op x2) ... : the order of the `linear` reference."""
    acc = xs[0].copy()
    for x in xs[1:]:
        acc = combine(acc, x, op)
    return acc

"""Type promotion of ops on several tensors: PyTorch's rule (`torch.result_type`) for the
dtypes tilepy.models computes in. The wider float wins, float16 with bfloat16 meets in
float32, a float beats any integer or bool; a 0-d tensor decides only when its category
(bool < integer < float) is above every other operand's. Owns the rule, not the casts.
"""

from __future__ import annotations

import numpy as np

_WIDTH = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}


def category(dtype) -> int:
    """0 bool, 1 integer, 2 float (bfloat16 included), -1 anything else."""
    if dtype.name in _WIDTH:
        return 2
    return {"b": 0, "i": 1, "u": 1}.get(dtype.kind, -1)


def _pair(a, b):
    """The promoted dtype of two dtypes (numpy's for bool and integers)."""
    if a == b:
        return a
    ca, cb = category(a), category(b)
    if ca != cb:
        return a if ca > cb else b
    if ca == 2:
        wa, wb = _WIDTH[a.name], _WIDTH[b.name]
        if wa == wb:  # float16 with bfloat16: neither holds the other
            return np.dtype(np.float32)
        return a if wa > wb else b
    return np.promote_types(a, b)


def _group(dtypes: list):
    out = None
    for d in dtypes:
        out = d if out is None else _pair(out, d)
    return out


def result_type(*arrays) -> np.dtype:
    """The dtype an op on these tensors (anything with .dtype and .ndim) computes in."""
    dims = _group([a.dtype for a in arrays if a.ndim > 0])
    zeros = _group([a.dtype for a in arrays if a.ndim == 0])
    if dims is None:
        return zeros
    if zeros is None or category(zeros) <= category(dims):
        return dims
    return _pair(dims, zeros)

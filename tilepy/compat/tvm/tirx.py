"""`tvm.tir` / `tvm.tirx` expression builders, as tilepy builtins the front end knows."""

from __future__ import annotations

import tilepy.language as _T
from tilepy.frontend.exprs import is_ir
from tilepy.frontend.surface import Builtin

const = Builtin("tir_const", lambda value, dtype=None: value)
Select = _T.if_then_else
if_then_else = _T.if_then_else
reinterpret = _T.reinterpret
Cast = _T.Cast
shift_left = _T.shift_left
shift_right = _T.shift_right
bitwise_and = _T.bitwise_and
bitwise_or = _T.bitwise_or
bitwise_xor = _T.bitwise_xor
max_value = _T.max_value if hasattr(_T, "max_value") else None
min_value = _T.min_value if hasattr(_T, "min_value") else None
floordiv = _T.floordiv
floormod = _T.floormod
exp = _T.exp
log = _T.log
sqrt = _T.sqrt


class _ExprType(type):
    def __instancecheck__(cls, x) -> bool:
        return is_ir(x)


class PrimExpr(metaclass=_ExprType):
    """isinstance(x, PrimExpr): x is a runtime value of the kernel (not a Python number)."""


IntImm = FloatImm = Var = PrimExpr

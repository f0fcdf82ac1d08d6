"""THE op table: every scalar op's names, type rule, numpy reference, scalar forms and doc.

The interpreter evaluates an op by `reference(op, args, dtype)` below; the JIT emits the
row's `scalar` template around the same compute-dtype and rounding rules. Semantics are
decided here and nowhere else. `gaps()` names what any row lacks; a test asserts none.

Evaluation contract (DESIGN.md, numerics):
- NATIVE ops compute in the operands' compute dtype (float32 for floats narrower than 32
  bits) and round once to the result dtype; float32/float64 are plain IEEE.
- F64 ops (transcendentals) compute in float64 and round once to the result dtype.
- Comparisons give bool. Casts convert as `cast_values` documents.
"""

from __future__ import annotations

import ast
import builtins
import enum
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tilepy.ir import scalar
from tilepy.ir.errors import TileTypeError
from tilepy.ir.types import DType, bool_, compute_dtype
from tilepy.ir.types import dtype as _dtype

_BF16 = _dtype("bfloat16")


class Op(enum.Enum):
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    FLOORDIV = "floordiv"
    MOD = "mod"
    MAX = "max"
    MIN = "min"
    POW = "pow"
    NEG = "neg"
    ABS = "abs"
    EXP = "exp"
    EXP2 = "exp2"
    LOG = "log"
    LOG2 = "log2"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    SOFTPLUS = "softplus"
    ERF = "erf"
    SIN = "sin"
    COS = "cos"
    FLOOR = "floor"
    CEIL = "ceil"
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    AND = "and"
    OR = "or"
    NOT = "not"
    BITAND = "bitand"
    BITOR = "bitor"
    BITXOR = "bitxor"
    BITNOT = "bitnot"
    SHL = "shl"
    SHR = "shr"
    SELECT = "select"
    CAST = "cast"
    CAST_SAT = "cast_sat"
    REINTERPRET = "reinterpret"
    FP4_TWIDDLED = "fp4_twiddled"

    def __str__(self) -> str:
        return self.value


class Compute(enum.Enum):
    NATIVE = "native"  # in the operands' compute dtype, rounded once to the result
    F64 = "f64"  # in float64, rounded once to the result
    COMPARE = "compare"  # in the operands' compute dtype, result bool
    CONVERT = "convert"  # casts: see cast_values


TypeRule = Callable[[tuple[DType, ...]], DType]


@dataclass(frozen=True)
class OpDef:
    """One scalar op, all of it. The front end's names, the JIT's namespaces (HELPERS, the
    py tier's) and the fast-mode bounds are built from these rows; `gaps` names what a
    row lacks."""

    op: Op
    arity: int
    compute: Compute
    type_rule: TypeRule
    numpy: Callable[..., np.ndarray]  # on compute-dtype arrays, before the final rounding
    scalar: str  # the JIT's form: a Python expression over compute-dtype scalars {0}, {1}, {2}
    doc: str
    names: tuple[str, ...] = ()  # T.<name> spellings (TileLang's first); () if operator-only
    helper: Callable | None = None  # the function `scalar` calls, as the numba tier calls it
    py: Callable | None = None  # what the py tier calls in its place (IEEE, no exceptions)
    to32: str | None = None  # F64: a vectorisable form for results of float32 or narrower
    fast: str | None = None  # F64: fast mode's form for float32 results, float32 operands
    fast_ulps: float | None = None  # the fast form's error bound, in ulps of its result
    where: str = field(default="", compare=False, repr=False)  # "ir/ops.py:LINE"

    def __post_init__(self):
        if not self.where:  # the line that built the row (dataclasses.replace keeps it)
            f = sys._getframe(2)  # 0: here, 1: the dataclass __init__, 2: the row
            path = os.path.normpath(f.f_code.co_filename).split(os.sep)
            object.__setattr__(self, "where", f"{'/'.join(path[-2:])}:{f.f_lineno}")

    @property
    def label(self) -> str:
        """How messages name the op: its surface name, else its enum member."""
        return f"T.{self.names[0]}" if self.names else f"Op.{self.op.name}"


# ---------------------------------------------------------------- type rules


def _same(what: str, ok: Callable[[DType], bool]) -> TypeRule:
    def rule(dts: tuple[DType, ...]) -> DType:
        first = dts[0]
        if any(d != first for d in dts):
            got = ", ".join(str(d) for d in dts)
            raise TileTypeError(f"operands of one op must have one dtype; got {got}")
        if not ok(first):
            raise TileTypeError(f"this op needs {what} operands; got {first}")
        return first

    return rule


def _any(d: DType) -> bool:
    return True


def _num(d: DType) -> bool:
    return not d.is_bool


def _flt(d: DType) -> bool:
    return d.is_float


def _int(d: DType) -> bool:
    return d.is_int


def _bool(d: DType) -> bool:
    return d.is_bool


def _compare_rule(dts: tuple[DType, ...]) -> DType:
    _same("comparable", _any)(dts)
    return bool_


def _select_rule(dts: tuple[DType, ...]) -> DType:
    cond, a, b = dts
    if not cond.is_bool:
        raise TileTypeError(f"the condition of if_then_else must be bool; got {cond}")
    return _same("any", _any)((a, b))


def _div_rule(dts: tuple[DType, ...]) -> DType:
    if dts[0].is_int:
        raise TileTypeError(
            f"'/' on integers ({dts[0]}) is not defined", hint="use '//' for floor division"
        )
    return _same("float", _flt)(dts)


def _fp4_twiddled_rule(dts: tuple[DType, ...]) -> DType:
    if any(d.name != "int32" for d in dts):
        got = ", ".join(str(d) for d in dts)
        raise TileTypeError(f"fp4_twiddled takes two int32 operands; got {got}")
    return _BF16


def _cast_rule(dts: tuple[DType, ...]) -> DType:  # the target is given by the Call
    raise AssertionError("casts take their result dtype from the call, not a rule")


# ---------------------------------------------------------------- numpy forms


def _maximum(a, b):
    """a if a >= b else b, and NaN if either is NaN (ties keep the first operand)."""
    if a.dtype.kind == "f":
        return np.where((a >= b) | (a != a), a, b)
    return np.where(a >= b, a, b)


def _minimum(a, b):
    if a.dtype.kind == "f":
        return np.where((a <= b) | (a != a), a, b)
    return np.where(a <= b, a, b)


def _floordiv(a, b):
    with np.errstate(all="ignore"):
        return np.where(b == 0, np.zeros_like(a), np.floor_divide(a, np.where(b == 0, 1, b)))


def _mod(a, b):
    with np.errstate(all="ignore"):
        return np.where(b == 0, np.zeros_like(a), np.remainder(a, np.where(b == 0, 1, b)))


def _shift(fn):
    def shift(a, s):
        bits = a.dtype.itemsize * 8
        inside = (s >= 0) & (s < bits)
        out = fn(a, np.where(inside, s, 0).astype(a.dtype))
        if fn is np.left_shift:
            return np.where(inside, out, np.zeros_like(a))
        fill = np.where(a < 0, -1, 0).astype(a.dtype)
        return np.where(inside, out, fill)

    return shift


def _erf(x):
    from scipy.special import erf  # scipy is a runtime dependency; loaded on first use

    return erf(x)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _softplus(x):
    """log(1 + e ** x) as max(x, 0) + log1p(e ** -|x|): no overflow for large x, and the
    tiny e ** x of very negative x kept (log(1 + e ** x) rounds it to 0)."""
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def _fp4_twiddled(h, j):
    """numpy form of scalar._fp4_twiddled: the fp4 (e2m1) value number j % 4 of the 16-bit
    twiddled half-word h, as float32. Bits (sign, exponent high, low, mantissa) per j:
    (15, 8, 7, 6), (12, 5, 4, 3), (9, 2, 1, 0), (14, 11, 10, 13)."""
    h, j = np.broadcast_arrays(np.asarray(h, dtype=np.int64), np.asarray(j, dtype=np.int64))
    sh = np.array([[15, 7, 6], [12, 4, 3], [9, 1, 0], [14, 10, 13]])[j & 3]
    s, e, m = ((h >> sh[..., 0]) & 1, (h >> sh[..., 1]) & 3, (h >> sh[..., 2]) & 1)
    mag = np.where(e == 0, 0.5 * m, (1.0 + 0.5 * m) * np.exp2(np.maximum(e - 1, 0)))
    return np.where(s == 1, -mag, mag).astype(np.float32)


# ---------------------------------------------------------------- the table

_N, _F, _C = Compute.NATIVE, Compute.F64, Compute.COMPARE
_NUM, _FLT = _same("numeric", _num), _same("float", _flt)
_INT, _BOOL = _same("integer", _int), _same("bool", _bool)
# `helper` / `py`: the function the scalar form calls (one per row), for the numba tier /
# the py tier: `_name` helpers are tilepy.ir.scalar's; `math.name` is Numba's math in the
# numba tier and `py` in the py tier; numpy functions and builtins are the same in both.
# CONVERT rows' scalar form is the JIT's cast code (jit/scalars.py); `scalar` only names it.
_ROWS = [
    OpDef(Op.ADD, 2, _N, _NUM, np.add, "({0} + {1})", "a + b"),
    OpDef(Op.SUB, 2, _N, _NUM, np.subtract, "({0} - {1})", "a - b"),
    OpDef(Op.MUL, 2, _N, _NUM, np.multiply, "({0} * {1})", "a * b"),
    OpDef(Op.DIV, 2, _N, _div_rule, np.true_divide, "({0} / {1})", "a / b, floats only"),
    OpDef(Op.FLOORDIV, 2, _N, _INT, _floordiv, "_floordiv({0}, {1})",
          "floor(a / b) on integers; x // 0 is 0", names=("floordiv",),
          helper=scalar._floordiv, py=scalar._floordiv),
    OpDef(Op.MOD, 2, _N, _INT, _mod, "_mod({0}, {1})",
          "a - b * floor(a / b) on integers (sign of b); x % 0 is 0", names=("floormod",),
          helper=scalar._mod, py=scalar._mod),
    OpDef(Op.MAX, 2, _N, _NUM, _maximum, "_max({0}, {1})",
          "a if a >= b else b; NaN if either is NaN", names=("max",),
          helper=scalar._max, py=scalar._max),
    OpDef(Op.MIN, 2, _N, _NUM, _minimum, "_min({0}, {1})",
          "a if a <= b else b; NaN if either is NaN", names=("min",),
          helper=scalar._min, py=scalar._min),
    OpDef(Op.POW, 2, _F, _FLT, np.power, "({0} ** {1})", "a ** b, in float64, rounded once",
          names=("pow",)),
    OpDef(Op.NEG, 1, _N, _NUM, np.negative, "(-{0})", "-a"),
    OpDef(Op.ABS, 1, _N, _NUM, np.abs, "abs({0})", "|a|", names=("abs",),
          helper=abs, py=abs),
    OpDef(Op.EXP, 1, _F, _FLT, np.exp, "math.exp({0})", "e ** a", names=("exp",),
          helper=math.exp, py=np.exp, to32="_exp_to32({0})",
          fast="_fexp32({0})", fast_ulps=2.0),
    OpDef(Op.EXP2, 1, _F, _FLT, np.exp2, "(2.0 ** {0})", "2 ** a", names=("exp2",),
          to32="_exp2_to32({0})", fast="_fexp2_32({0})", fast_ulps=2.0),
    OpDef(Op.LOG, 1, _F, _FLT, np.log, "_log({0})", "natural log", names=("log",),
          helper=scalar._log, py=scalar._log),
    OpDef(Op.LOG2, 1, _F, _FLT, np.log2, "_log2({0})", "log base 2", names=("log2",),
          helper=scalar._log2, py=scalar._log2),
    OpDef(Op.SQRT, 1, _F, _FLT, np.sqrt, "_sqrt({0})", "square root", names=("sqrt",),
          helper=scalar._sqrt, py=scalar._sqrt),
    OpDef(Op.RSQRT, 1, _F, _FLT, _rsqrt, "(1.0 / _sqrt({0}))", "1 / sqrt(a), rounded once",
          names=("rsqrt",), helper=scalar._sqrt, py=scalar._sqrt),
    OpDef(Op.TANH, 1, _F, _FLT, np.tanh, "math.tanh({0})", "tanh", names=("tanh",),
          helper=math.tanh, py=np.tanh, to32="_tanh_to32({0})"),
    OpDef(Op.SIGMOID, 1, _F, _FLT, _sigmoid, "(1.0 / (1.0 + math.exp(-{0})))",
          "1 / (1 + e ** -a), rounded once", names=("sigmoid",),
          helper=math.exp, py=np.exp, to32="(1.0 / (1.0 + _exp_to32(-{0})))",
          fast="(np.float32(1.0) / (np.float32(1.0) + _fexp32(-{0})))", fast_ulps=3.0),
    OpDef(Op.SOFTPLUS, 1, _F, _FLT, _softplus, "_softplus({0})",
          "log(1 + e ** a), in float64, rounded once", names=("softplus",),
          helper=scalar._softplus, py=scalar._softplus),
    OpDef(Op.ERF, 1, _F, _FLT, _erf, "math.erf({0})", "error function", names=("erf",),
          helper=math.erf, py=scalar._py_erf, to32="_erf_to32({0})", fast="_ferf32({0})",
          fast_ulps=1.0),
    OpDef(Op.SIN, 1, _F, _FLT, np.sin, "math.sin({0})", "sine", names=("sin",),
          helper=math.sin, py=np.sin),
    OpDef(Op.COS, 1, _F, _FLT, np.cos, "math.cos({0})", "cosine", names=("cos",),
          helper=math.cos, py=np.cos),
    OpDef(Op.FLOOR, 1, _N, _FLT, np.floor, "np.floor({0})", "round down", names=("floor",),
          helper=np.floor, py=np.floor),
    OpDef(Op.CEIL, 1, _N, _FLT, np.ceil, "np.ceil({0})", "round up", names=("ceil",),
          helper=np.ceil, py=np.ceil),
    OpDef(Op.EQ, 2, _C, _compare_rule, np.equal, "({0} == {1})", "a == b"),
    OpDef(Op.NE, 2, _C, _compare_rule, np.not_equal, "({0} != {1})", "a != b"),
    OpDef(Op.LT, 2, _C, _compare_rule, np.less, "({0} < {1})", "a < b"),
    OpDef(Op.LE, 2, _C, _compare_rule, np.less_equal, "({0} <= {1})", "a <= b"),
    OpDef(Op.GT, 2, _C, _compare_rule, np.greater, "({0} > {1})", "a > b"),
    OpDef(Op.GE, 2, _C, _compare_rule, np.greater_equal, "({0} >= {1})", "a >= b"),
    OpDef(Op.AND, 2, _N, _BOOL, np.logical_and, "({0} and {1})", "a and b"),
    OpDef(Op.OR, 2, _N, _BOOL, np.logical_or, "({0} or {1})", "a or b"),
    OpDef(Op.NOT, 1, _N, _BOOL, np.logical_not, "(not {0})", "not a"),
    OpDef(Op.BITAND, 2, _N, _INT, np.bitwise_and, "({0} & {1})", "a & b",
          names=("bitwise_and",)),
    OpDef(Op.BITOR, 2, _N, _INT, np.bitwise_or, "({0} | {1})", "a | b",
          names=("bitwise_or",)),
    OpDef(Op.BITXOR, 2, _N, _INT, np.bitwise_xor, "({0} ^ {1})", "a ^ b",
          names=("bitwise_xor",)),
    OpDef(Op.BITNOT, 1, _N, _INT, np.invert, "(~{0})", "~a", names=("bitwise_not",)),
    OpDef(Op.SHL, 2, _N, _INT, _shift(np.left_shift), "_shl({0}, {1})",
          "a << s; 0 when s is outside [0, bits)", names=("shift_left",),
          helper=scalar._shl, py=scalar._shl),
    OpDef(Op.SHR, 2, _N, _INT, _shift(np.right_shift), "_shr({0}, {1})",
          "a >> s (arithmetic for signed); sign fill when s is outside [0, bits)",
          names=("shift_right",), helper=scalar._shr, py=scalar._shr),
    OpDef(Op.SELECT, 3, _N, _select_rule, np.where, "({1} if {0} else {2})",
          "T.if_then_else(cond, a, b)", names=("if_then_else",)),
    OpDef(Op.CAST, 1, Compute.CONVERT, _cast_rule, np.asarray, "_cast({0})",
          "convert to the call's dtype (see cast_values)", names=("cast",)),
    OpDef(Op.CAST_SAT, 1, Compute.CONVERT, _cast_rule, np.asarray, "_cast_sat({0})",
          "convert, clamping finite overflow to the largest finite value"),
    OpDef(Op.REINTERPRET, 1, Compute.CONVERT, _cast_rule, np.asarray, "_reinterpret({0})",
          "the same bits read as another dtype of the same width", names=("reinterpret",)),
    OpDef(Op.FP4_TWIDDLED, 2, _N, _fp4_twiddled_rule, _fp4_twiddled, "_fp4_twiddled({0}, {1})",
          "fp4 (e2m1) value j % 4 of the twiddled 16-bit half-word h (TileLang's "
          "decode_fp4_to_bf16_twiddling), exact in bfloat16",
          helper=scalar._fp4_twiddled, py=scalar._fp4_twiddled),
]

OPS: dict[Op, OpDef] = {row.op: row for row in _ROWS}
CASTS = (Op.CAST, Op.CAST_SAT, Op.REINTERPRET)
# every T.<name> of an op; T.cast(..., saturate=True) is CAST_SAT
SURFACE: dict[str, Op] = {name: row.op for row in _ROWS for name in row.names}
# T.<name>(operands) is Call(op, operands) for these; casts (a dtype argument) and
# if_then_else (a condition) have front-end handlers of their own
FUNCTIONS: dict[str, Op] = {name: op for name, op in SURFACE.items()
                            if OPS[op].compute is not Compute.CONVERT and op is not Op.SELECT}


def called(template: str) -> tuple[str, ...]:
    """The functions a scalar-form template calls, as written ("math.exp", "_log", "abs");
    numpy scalar types (`np.float32(...)`) convert, and do not count."""
    names: list[str] = []
    for node in ast.walk(ast.parse(template.format("x", "y", "z"), mode="eval")):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            conv = name.startswith("np.") and isinstance(getattr(np, name[3:], None), type)
            if not conv and name not in names:
                names.append(name)
    return tuple(names)


# the function each (non-cast) scalar form calls, by the name it calls it, and the row that
# supplies it for both tiers: the JIT's namespaces are built from this
CALLS: dict[str, OpDef] = {fn: row for row in _ROWS if row.compute is not Compute.CONVERT
                           for fn in called(row.scalar)[:1]}


def result_dtype(op: Op, arg_dtypes: tuple[DType, ...]) -> DType:
    """Apply the op's type rule (raises TileTypeError; the caller attaches the location)."""
    row = OPS[op]
    if len(arg_dtypes) != row.arity:
        raise TileTypeError(f"{op} takes {row.arity} operand(s); got {len(arg_dtypes)}")
    return row.type_rule(arg_dtypes)


# ---------------------------------------------------------------- completeness


def gaps(table: dict[Op, OpDef] | None = None) -> list[str]:
    """One message per entry an op lacks or contradicts ([] when the table is whole), such
    as "T.exp: no py-tier function for math.exp (row at ir/ops.py:240)". The functions that
    to32 and fast forms call are the JIT's (jit/mathlib.py); tests/jit checks those."""
    table = OPS if table is None else table
    out = [f"Op.{op.name}: no row in the op table (ir/ops.py)" for op in Op if op not in table]
    names: dict[str, OpDef] = {}
    calls: dict[str, OpDef] = {}
    for row in table.values():
        found = _entry_gaps(row, names) + _variant_gaps(row)
        if row.compute is not Compute.CONVERT:
            found += _call_gaps(row, calls)
        out += [f"{row.label}: {m} (row at {row.where})" for m in found]
    return out


def _entry_gaps(row: OpDef, names: dict[str, OpDef]) -> list[str]:
    out = []
    if not callable(row.numpy):
        out.append("no numpy reference (the interpreter's semantics)")
    if not callable(row.type_rule):
        out.append("no type rule")
    if not row.doc:
        out.append("no doc line")
    for name in row.names:
        other = names.setdefault(name, row)
        if not name.isidentifier():
            out.append(f"the surface name {name!r} is not a Python name")
        elif other is not row:
            out.append(f"T.{name} also names Op.{other.op.name}")
    return out


def _call_gaps(row: OpDef, calls: dict[str, OpDef]) -> list[str]:
    fns = called(row.scalar)
    if len(fns) > 1:
        return [f"its scalar form calls {', '.join(fns)}; a row supplies one function"]
    if not fns:
        extra = row.helper is not None or row.py is not None
        return ["a helper or py-tier function that its scalar form never calls"] if extra else []
    fn, out = fns[0], []
    if row.helper is None:
        out.append(f"no Numba helper for {fn}")
    if row.py is None:
        out.append(f"no py-tier function for {fn}")
    if fn.startswith("math.") and row.helper not in (None, getattr(math, fn[5:], None)):
        out.append(f"its helper is not {fn}, which the numba tier calls")
    if not fn.startswith(("_", "math.")):
        same = getattr(np, fn[3:], None) if fn.startswith("np.") else getattr(builtins, fn, None)
        if row.helper is not same or row.py is not same:
            out.append(f"both tiers call {fn} itself: helper and py must be it")
    other = calls.setdefault(fn, row)
    whole = None not in (other.helper, other.py, row.helper, row.py)
    if whole and (other.helper, other.py) != (row.helper, row.py):
        out.append(f"{fn} is another function in Op.{other.op.name}'s row")
    return out


def _variant_gaps(row: OpDef) -> list[str]:
    out = []
    if row.compute is not Compute.F64 and (row.to32 or row.fast):
        out.append("a to32 or fast form on an op that is not computed in float64")
    if row.fast and row.fast_ulps is None:
        out.append("a fast form without its ulp charge (fast_ulps)")
    if row.fast_ulps is not None and not row.fast:
        out.append("an ulp charge (fast_ulps) without a fast form")
    return out


# ---------------------------------------------------------------- the reference


def round_values(x: np.ndarray, dt: DType) -> np.ndarray:
    """`x` rounded (or wrapped) to `dt`, returned in dt's compute dtype."""
    from tilepy.precision import round_to

    return round_to(x, dt.name)


def cast_values(x: np.ndarray, src: DType, dst: DType, saturate: bool = False) -> np.ndarray:
    """Convert compute-dtype values of `src` to compute-dtype values of `dst`.

    - to float: round to nearest even, once, from the exact source value; overflow follows
      the format (inf, NaN or saturation) unless `saturate` clamps to the largest finite;
    - float to integer: truncate toward zero, clamp to the integer's range, NaN gives 0;
    - integer to narrower integer: wrap (two's complement); to bool: x != 0.
    """
    if dst.is_bool:
        return np.asarray(x != 0)
    if dst.is_float:
        if src.is_int and src.bits > 24 and dst.bits <= 32:
            x = x.astype(np.float64)  # exact for |x| < 2**53; then one rounding below
        if saturate:
            from tilepy.precision import cast

            # in float64, so the clamp bound is not itself rounded to the source's inf
            x64 = np.asarray(x, dtype=np.float64)
            return cast(x64, dst.name, saturate=True).astype(compute_dtype(dst))
        return round_values(np.asarray(x), dst)
    if src.is_float:
        return float_to_int(x, dst)
    return wrap_int(np.asarray(x).astype(np.int64), dst)


def float_to_int(x: np.ndarray, dst: DType) -> np.ndarray:
    """Truncate toward zero, clamp to dst's exact integer range, NaN -> 0."""
    import ml_dtypes

    info = ml_dtypes.iinfo(dst.np_dtype)
    t = np.trunc(np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0, posinf=np.inf,
                               neginf=-np.inf))
    # float(info.max) may round up (2**63 for int64): anything >= it is out of range
    high, low = t >= float(info.max), t <= float(info.min)
    inside = np.where(high | low, 0.0, t)
    out = inside.astype(compute_dtype(dst))
    out = np.where(high, np.asarray(info.max).astype(out.dtype), out)
    return np.where(low, np.asarray(info.min).astype(out.dtype), out).astype(out.dtype)


def wrap_int(x: np.ndarray, dt: DType) -> np.ndarray:
    """Integers wrapped (two's complement) into `dt`, in dt's compute dtype."""
    if dt.bits == 4:
        x = x.astype(np.int64) & 0xF
        if dt.kind == "int":
            x = np.where(x >= 8, x - 16, x)
    return x.astype(compute_dtype(dt))


def reinterpret_values(x: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    """The bits of `src` values read as `dst` (same width), in dst's compute dtype."""
    from tilepy.precision import cast

    stored = cast(x, src.name) if src.is_float else np.asarray(x).astype(src.np_dtype)
    return stored.view(dst.np_dtype).astype(compute_dtype(dst))


def reference(op: Op, args: list[np.ndarray], arg_dtypes: tuple[DType, ...], dt: DType):
    """The value of `op(*args)` as the interpreter defines it (compute dtype of `dt`).

    `args` are compute-dtype arrays (or numpy scalars) of `arg_dtypes`; broadcasting
    applies. This is the numerics contract in code.
    """
    row = OPS[op]
    if row.compute is Compute.CONVERT:
        if op is Op.REINTERPRET:
            return reinterpret_values(args[0], arg_dtypes[0], dt)
        return cast_values(args[0], arg_dtypes[0], dt, saturate=op is Op.CAST_SAT)
    with np.errstate(all="ignore"):
        if row.compute is Compute.F64:
            out = row.numpy(*[np.asarray(a, dtype=np.float64) for a in args])
            return round_values(out, dt)
        out = row.numpy(*args)
    if row.compute is Compute.COMPARE:
        return np.asarray(out, dtype=bool)
    if dt.is_narrow_float:
        return round_values(out, dt)
    if dt.is_int and dt.bits == 4:
        return wrap_int(out, dt)
    return np.asarray(out, dtype=compute_dtype(dt))

"""THE op table: every scalar op's type rule, numpy reference, scalar form and doc.

The interpreter evaluates an op by `reference(op, args, dtype)` below; the JIT emits the
row's `scalar` template around the same compute-dtype and rounding rules. Semantics are
decided here and nowhere else. A test asserts every `Op` has a complete row.

Evaluation contract (DESIGN.md, numerics):
- NATIVE ops compute in the operands' compute dtype (float32 for floats narrower than 32
  bits) and round once to the result dtype; float32/float64 are plain IEEE.
- F64 ops (transcendentals) compute in float64 and round once to the result dtype.
- Comparisons give bool. Casts convert as `cast_values` documents.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tilepy.ir.errors import TileTypeError
from tilepy.ir.types import DType, bool_, compute_dtype


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
    op: Op
    arity: int
    compute: Compute
    type_rule: TypeRule
    numpy: Callable[..., np.ndarray]  # on compute-dtype arrays, before the final rounding
    scalar: str  # Python expression over compute-dtype scalars {0}, {1}, {2}
    doc: str


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


# ---------------------------------------------------------------- the table

_N, _F, _C = Compute.NATIVE, Compute.F64, Compute.COMPARE
_ROWS = [
    OpDef(Op.ADD, 2, _N, _same("numeric", _num), np.add, "({0} + {1})", "a + b"),
    OpDef(Op.SUB, 2, _N, _same("numeric", _num), np.subtract, "({0} - {1})", "a - b"),
    OpDef(Op.MUL, 2, _N, _same("numeric", _num), np.multiply, "({0} * {1})", "a * b"),
    OpDef(Op.DIV, 2, _N, _div_rule, np.true_divide, "({0} / {1})", "a / b, floats only"),
    OpDef(Op.FLOORDIV, 2, _N, _same("integer", _int), _floordiv, "_floordiv({0}, {1})",
          "floor(a / b) on integers; x // 0 is 0"),
    OpDef(Op.MOD, 2, _N, _same("integer", _int), _mod, "_mod({0}, {1})",
          "a - b * floor(a / b) on integers (sign of b); x % 0 is 0"),
    OpDef(Op.MAX, 2, _N, _same("numeric", _num), _maximum,
          "_max({0}, {1})", "a if a >= b else b; NaN if either is NaN"),
    OpDef(Op.MIN, 2, _N, _same("numeric", _num), _minimum,
          "_min({0}, {1})", "a if a <= b else b; NaN if either is NaN"),
    OpDef(Op.POW, 2, _F, _same("float", _flt), np.power, "({0} ** {1})",
          "a ** b, in float64, rounded once"),
    OpDef(Op.NEG, 1, _N, _same("numeric", _num), np.negative, "(-{0})", "-a"),
    OpDef(Op.ABS, 1, _N, _same("numeric", _num), np.abs, "abs({0})", "|a|"),
    OpDef(Op.EXP, 1, _F, _same("float", _flt), np.exp, "math.exp({0})", "e ** a"),
    OpDef(Op.EXP2, 1, _F, _same("float", _flt), np.exp2, "(2.0 ** {0})", "2 ** a"),
    OpDef(Op.LOG, 1, _F, _same("float", _flt), np.log, "_log({0})", "natural log"),
    OpDef(Op.LOG2, 1, _F, _same("float", _flt), np.log2, "_log2({0})", "log base 2"),
    OpDef(Op.SQRT, 1, _F, _same("float", _flt), np.sqrt, "_sqrt({0})", "square root"),
    OpDef(Op.RSQRT, 1, _F, _same("float", _flt), _rsqrt, "(1.0 / _sqrt({0}))",
          "1 / sqrt(a), rounded once"),
    OpDef(Op.TANH, 1, _F, _same("float", _flt), np.tanh, "math.tanh({0})", "tanh"),
    OpDef(Op.SIGMOID, 1, _F, _same("float", _flt), _sigmoid,
          "(1.0 / (1.0 + math.exp(-{0})))", "1 / (1 + e ** -a), rounded once"),
    OpDef(Op.ERF, 1, _F, _same("float", _flt), _erf, "math.erf({0})", "error function"),
    OpDef(Op.SIN, 1, _F, _same("float", _flt), np.sin, "math.sin({0})", "sine"),
    OpDef(Op.COS, 1, _F, _same("float", _flt), np.cos, "math.cos({0})", "cosine"),
    OpDef(Op.FLOOR, 1, _N, _same("float", _flt), np.floor, "np.floor({0})", "round down"),
    OpDef(Op.CEIL, 1, _N, _same("float", _flt), np.ceil, "np.ceil({0})", "round up"),
    OpDef(Op.EQ, 2, _C, _compare_rule, np.equal, "({0} == {1})", "a == b"),
    OpDef(Op.NE, 2, _C, _compare_rule, np.not_equal, "({0} != {1})", "a != b"),
    OpDef(Op.LT, 2, _C, _compare_rule, np.less, "({0} < {1})", "a < b"),
    OpDef(Op.LE, 2, _C, _compare_rule, np.less_equal, "({0} <= {1})", "a <= b"),
    OpDef(Op.GT, 2, _C, _compare_rule, np.greater, "({0} > {1})", "a > b"),
    OpDef(Op.GE, 2, _C, _compare_rule, np.greater_equal, "({0} >= {1})", "a >= b"),
    OpDef(Op.AND, 2, _N, _same("bool", _bool), np.logical_and, "({0} and {1})", "a and b"),
    OpDef(Op.OR, 2, _N, _same("bool", _bool), np.logical_or, "({0} or {1})", "a or b"),
    OpDef(Op.NOT, 1, _N, _same("bool", _bool), np.logical_not, "(not {0})", "not a"),
    OpDef(Op.BITAND, 2, _N, _same("integer", _int), np.bitwise_and, "({0} & {1})", "a & b"),
    OpDef(Op.BITOR, 2, _N, _same("integer", _int), np.bitwise_or, "({0} | {1})", "a | b"),
    OpDef(Op.BITXOR, 2, _N, _same("integer", _int), np.bitwise_xor, "({0} ^ {1})", "a ^ b"),
    OpDef(Op.BITNOT, 1, _N, _same("integer", _int), np.invert, "(~{0})", "~a"),
    OpDef(Op.SHL, 2, _N, _same("integer", _int), _shift(np.left_shift), "_shl({0}, {1})",
          "a << s; 0 when s is outside [0, bits)"),
    OpDef(Op.SHR, 2, _N, _same("integer", _int), _shift(np.right_shift), "_shr({0}, {1})",
          "a >> s (arithmetic for signed); sign fill when s is outside [0, bits)"),
    OpDef(Op.SELECT, 3, _N, _select_rule, np.where, "({1} if {0} else {2})",
          "T.if_then_else(cond, a, b)"),
    OpDef(Op.CAST, 1, Compute.CONVERT, _cast_rule, np.asarray, "_cast({0})",
          "convert to the call's dtype (see cast_values)"),
    OpDef(Op.CAST_SAT, 1, Compute.CONVERT, _cast_rule, np.asarray, "_cast_sat({0})",
          "convert, clamping finite overflow to the largest finite value"),
    OpDef(Op.REINTERPRET, 1, Compute.CONVERT, _cast_rule, np.asarray, "_reinterpret({0})",
          "the same bits read as another dtype of the same width"),
]

OPS: dict[Op, OpDef] = {row.op: row for row in _ROWS}
CASTS = (Op.CAST, Op.CAST_SAT, Op.REINTERPRET)


def result_dtype(op: Op, arg_dtypes: tuple[DType, ...]) -> DType:
    """Apply the op's type rule (raises TileTypeError; the caller attaches the location)."""
    row = OPS[op]
    if len(arg_dtypes) != row.arity:
        raise TileTypeError(f"{op} takes {row.arity} operand(s); got {len(arg_dtypes)}")
    return row.type_rule(arg_dtypes)


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

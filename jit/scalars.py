"""Scalar expressions to Python source: op-table templates, constants, casts, buffer access.

Every string this module returns evaluates to a value of its IR dtype's compute dtype
(float32 for narrow floats). It transcribes ir/ops.py (templates, NATIVE/F64/COMPARE
rounding) and the precision codecs; it decides no semantics of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tilepy.ir.errors import Loc, LoweringError
from tilepy.ir.expr import Buffer, Call, Const, Expr, Load, Var
from tilepy.ir.ops import OPS, Compute, Op, cast_values, round_values, wrap_int
from tilepy.ir.types import DType, Scope, compute_dtype, float64
from tilepy.jit.runtime import MAX_GUARDED_RANK, codec_name
from tilepy.jit.source import Names


@dataclass
class BufRef:
    """How a buffer appears in the generated code.

    kind: "global" (a kernel argument, accesses guarded: out-of-range reads give 0, writes
    are dropped), "array" (a block-local numpy array in the compute dtype) or "scalar"
    (a `T.alloc_var`, a plain variable). `codec`: the format whose storage codes a global
    holds (narrow floats as uint8/uint16, 4-bit ints as nibbles), else None."""

    buf: Buffer
    name: str
    kind: str
    codec: str | None = None


def storage_codec(dt: DType) -> str | None:
    """The format name whose codes a global array of `dt` holds in Numba, if any."""
    if dt.is_narrow_float or (dt.is_int and dt.bits == 4):
        return dt.name
    return None


def np_name(dt: DType) -> str:
    """`np.float32`, `np.int8`...: the constructor of dt's compute dtype."""
    c = compute_dtype(dt)
    return "np.bool_" if c == np.bool_ else f"np.{c.name}"


def storage_name(dt: DType) -> str:
    c = storage_codec(dt)
    if c is None:
        return np_name(dt)
    return "np.uint8" if dt.itemsize == 1 else "np.uint16"


@dataclass
class Emitter:
    """Turns IR expressions into Python expressions; records the codecs it uses."""

    names: Names
    fast: bool = False  # the opt-in fast mode (jit/fast.py)
    bufs: dict[str, BufRef] = field(default_factory=dict)
    vars: dict[str, str] = field(default_factory=dict)
    codecs: set[tuple[str, str]] = field(default_factory=set)
    loc: Loc | None = None
    block_writers: list = field(default_factory=list)  # (name, Writer) per launch
    block_vars: list = field(default_factory=list)  # the current launch's block ids
    notes: set = field(default_factory=set)  # what the loader must know (fast.BLAS_IN_BLOCKS)
    hoisted: set = field(default_factory=set)  # variables the hoist pass bound
    strict: bool = False  # out-of-range global element accesses are faults (jit/bounds.py)
    safe: dict = field(default_factory=dict)  # global name -> T.annotate_safe_value's value
    direct: dict = field(default_factory=dict)  # id(For) -> jit/direct.py's DirectLoop

    # -------------------------------------------------------------- names

    def bind_var(self, v: Var) -> str:
        py = self.names.user("var", v.name)
        self.vars[v.name] = py
        return py

    def codec(self, kind: str, fmt: str) -> str:
        self.codecs.add((kind, fmt))
        return codec_name(kind, fmt)

    def ref(self, buf: Buffer) -> BufRef:
        r = self.bufs.get(buf.name)
        if r is None:
            raise LoweringError(f"buffer '{buf.name}' is used before it is allocated",
                                loc=self.loc, hint="allocate it with T.alloc_* first")
        return r

    # -------------------------------------------------------------- expressions

    def expr(self, e: Expr) -> str:
        if isinstance(e, Const):
            return self.const(e.value, e.dtype)
        if isinstance(e, Var):
            if e.name not in self.vars:
                raise LoweringError(f"'{e.name}' is used before it is defined", loc=self.loc)
            return self.vars[e.name]
        if isinstance(e, Load):
            return self.load(e.buffer, [self.expr(i) for i in e.indices])
        if isinstance(e, Call):
            return self.call(e)
        raise LoweringError(f"the JIT cannot lower the expression {type(e).__name__}",
                            loc=self.loc)

    def call(self, c: Call) -> str:
        below = _below_pair(c)
        if below is not None:
            return f"_below({self.expr(below[0])}, {self.expr(below[1])})"
        row = OPS[c.op]
        dts = tuple(a.dtype for a in c.args)
        if row.compute is Compute.CONVERT:
            return self.convert(c.op, self.expr(c.args[0]), dts[0], c.dtype)
        args = [self.expr(a) for a in c.args]
        tmpl = row.scalar
        if row.compute is Compute.F64:
            if self.fast and c.dtype.name == "float32" and row.fast:
                return row.fast.format(*[f"np.float32({a})" for a in args])
            # the row's vectorisable float64 form (jit/mathlib.py: within ~1 ulp of float64,
            # so the rounded result differs from libm's only in rare ties, as the contract
            # allows); a float64 result keeps the libm form
            if row.to32 and (c.dtype.name == "float32" or c.dtype.is_narrow_float):
                tmpl = row.to32
            body = tmpl.format(*[f"np.float64({a})" for a in args])
            return self.round64(body, c.dtype)
        body = tmpl.format(*args)
        if row.compute is Compute.COMPARE:
            return body
        return self.round_native(body, c.dtype)

    def round_native(self, body: str, dt: DType) -> str:
        """A compute-dtype result rounded (or wrapped) to `dt`, as NATIVE ops are."""
        if dt.is_bool or dt.name in ("float32", "float64"):
            return body
        if dt.is_narrow_float:
            return f"{self.codec('rnd', dt.name)}({body})"
        if dt.bits == 4:
            return f"_wrap_{dt.name}({body})"
        return f"{np_name(dt)}({body})"

    def round64(self, body: str, dt: DType) -> str:
        """A float64 result rounded once to `dt` (F64 ops, float64 -> narrow casts)."""
        if dt.name == "float64":
            return f"np.float64({body})"
        if dt.name == "float32":
            return f"np.float32({body})"
        return f"{self.codec('rnd', dt.name)}(_f32_odd({body}))"

    # -------------------------------------------------------------- constants

    def const(self, value, dt: DType) -> str:
        if dt.is_bool:
            return "True" if value else "False"
        if dt.is_float:
            v = float(value)
            if dt.is_narrow_float:
                v = float(round_values(np.asarray(v, dtype=np.float64), dt))
            return f"{np_name(dt)}({_float_literal(v)})"
        v = int(wrap_int(np.asarray(int(value), dtype=np.int64), dt)) if dt.bits == 4 else value
        if dt.name == "uint64":  # Numba types uint64 mixed with an int literal as float64
            return f"np.uint64({int(v)})"
        # a plain literal: every integer op's result is wrapped to its dtype (round_native)
        return str(int(v))

    def zero(self, dt: DType) -> str:
        return self.const(0, dt)

    # -------------------------------------------------------------- casts

    def convert(self, op: Op, x: str, src: DType, dst: DType) -> str:
        if op is Op.REINTERPRET:
            return self.reinterpret(x, src, dst)
        return self.cast(x, src, dst, saturate=op is Op.CAST_SAT)

    def cast(self, x: str, src: DType, dst: DType, saturate: bool = False) -> str:
        """`cast_values(x, src, dst, saturate)` of ir/ops.py, as an expression."""
        if dst.is_bool:
            return f"({x} != 0)"
        if dst.is_float:
            return self._to_float(x, src, dst, saturate)
        if src.is_float and dst.bits == 64:  # 2**63 / 2**64 are out of range: clamp below
            return f"_f2{'i' if dst.kind == 'int' else 'u'}64(np.float64({x}))"
        if src.is_float:
            lo, hi = _float_literal(dst.min_value), _float_literal(dst.max_finite)
            return f"{np_name(dst)}(_f2i(np.float64({x}), {lo}, {hi}))"
        if src == dst:
            return x
        if dst.bits == 4:
            return f"_wrap_{dst.name}({x})"
        return f"{np_name(dst)}({x})"

    def _to_float(self, x: str, src: DType, dst: DType, saturate: bool) -> str:
        if src == dst and not saturate:
            return x
        wide = src.name == "float64" or not src.is_float  # ints/bools go through float64
        if (wide or dst.name == "float64") and src.name != "float64":
            x = f"np.float64({x})"  # (exact; and the float64 bound must not become inf)
        if saturate and dst.name in ("float32", "float64"):
            m = _float_literal(dst.max_finite)
            x = f"_clamp({x}, -{m}, {m})"
        if dst.name == "float64":
            return f"np.float64({x})"
        if dst.name == "float32":
            return f"np.float32({x})"
        if wide:
            x = f"_f32_odd({x})"
        if saturate:
            return f"{self.codec('dec', dst.name)}({self.codec('encs', dst.name)}({x}))"
        return f"{self.codec('rnd', dst.name)}({x})"

    def reinterpret(self, x: str, src: DType, dst: DType) -> str:
        if src.bits != dst.bits or src.bits == 64 or src.is_bool or dst.is_bool:
            raise LoweringError(
                f"the JIT cannot reinterpret {src} as {dst} yet",
                loc=self.loc, hint="use the interpreter backend for this kernel")
        return self._from_bits(self._to_bits(x, src), dst)

    def _to_bits(self, x: str, src: DType) -> str:
        if src.name == "float32":
            return f"_bits32({x})"
        if src.is_narrow_float:
            return f"{self.codec('enc', src.name)}({x})"
        if src.bits == 4:
            return f"_wrap_uint4({x})"
        return f"np.uint{src.bits}({x})"

    def _from_bits(self, bits: str, dst: DType) -> str:
        if dst.name == "float32":
            return f"_from_bits32({bits})"
        if dst.is_narrow_float:
            return f"{self.codec('dec', dst.name)}({storage_name(dst)}({bits}))"
        if dst.bits == 4:
            return f"_wrap_{dst.name}({bits})"
        return f"{np_name(dst)}({bits})"

    # -------------------------------------------------------------- buffer access

    def load(self, buf: Buffer, idx: list[str]) -> str:
        """The value of buf[idx] in buf's compute dtype (globals: guarded, decoded)."""
        r = self.ref(buf)
        if r.kind == "scalar":
            return r.name
        if r.kind == "array":
            return f"{r.name}[{', '.join(idx)}]" if idx else f"{r.name}[0]"
        self._check_rank(buf)
        raw = f"_ld{len(idx)}({r.name}, {', '.join(idx)}, {self.safe_literal(buf)})"
        return self.decode(raw, buf.dtype)

    def safe_literal(self, buf: Buffer) -> str:
        """The stored form of what an out-of-range load of global `buf` gives: its
        `T.annotate_safe_value` rounded to its dtype as a store rounds, else 0."""
        v, dt = self.safe.get(buf.root.name, 0), buf.dtype
        if v == 0 and math.copysign(1.0, v) > 0:
            return f"{storage_name(dt)}(0)"
        if dt.is_float:
            x = np.asarray(cast_values(np.asarray(float(v)), float64, dt))
            if storage_codec(dt) is None:
                return f"{storage_name(dt)}({_float_literal(float(x))})"
            bits = x.reshape(1).astype(dt.np_dtype).view(
                np.uint8 if dt.itemsize == 1 else np.uint16)
            return f"{storage_name(dt)}({int(bits[0])})"
        n = int(np.asarray(v).astype(dt.np_dtype))
        return self.encode(f"{np_name(dt)}({n})", dt) if storage_codec(dt) \
            else f"{storage_name(dt)}({n})"

    def load_unguarded(self, buf: Buffer, idx: list[str]) -> str:
        """buf[idx] for indices known to be inside the buffer."""
        r = self.ref(buf)
        if r.kind != "global":
            return self.load(buf, idx)
        return self.decode(f"{r.name}[{', '.join(idx)}]", buf.dtype)

    def decode(self, raw: str, dt: DType) -> str:
        c = storage_codec(dt)
        if c is None:
            return raw
        if dt.is_int:
            return f"_wrap_{dt.name}({raw})"
        return f"{self.codec('dec', c)}({raw})"

    def encode(self, value: str, dt: DType) -> str:
        """Storage form of a compute value already rounded to dt (a global's element)."""
        c = storage_codec(dt)
        if c is None:
            return value
        if dt.is_int:
            return f"_wrap_uint4({value})"
        # enc(rnd(x)) is enc(x): rnd is dec(enc(x)), and a code's decoded value encodes to
        # that code. The second encode was most of a narrow kernel's output stores.
        value = _call_arg(value, codec_name("rnd", c)) or value
        return f"{self.codec('enc', c)}({value})"

    def store(self, buf: Buffer, idx: list[str], value: str, guarded: bool = True) -> list[str]:
        """Lines storing `value` (a compute value of buf's dtype) at buf[idx]."""
        r = self.ref(buf)
        if r.kind == "scalar":
            return [f"{r.name} = {np_name(buf.dtype)}({value})"]
        if r.kind == "array":
            target = f"{r.name}[{', '.join(idx)}]" if idx else f"{r.name}[0]"
            return [f"{target} = {value}"]
        self._check_rank(buf)
        line = f"{r.name}[{', '.join(idx)}] = {self.encode(value, buf.dtype)}"
        if not guarded:
            return [line]
        return [f"if _in{len(idx)}({r.name}, {', '.join(idx)}):", "    " + line]

    def _check_rank(self, buf: Buffer) -> None:
        if not 1 <= buf.ndim <= MAX_GUARDED_RANK:
            raise LoweringError(
                f"the JIT supports global buffers of rank 1..{MAX_GUARDED_RANK}; "
                f"'{buf.name}' has rank {buf.ndim}", loc=self.loc,
                hint="reshape the tensor (T.Tensor(shape, dtype, buf.data)) to fewer dims")


def _float_literal(v: float) -> str:
    if math.isnan(v):
        return "np.nan"
    if math.isinf(v):
        return "np.inf" if v > 0 else "-np.inf"
    return repr(float(v))


def is_scalar_buffer(buf: Buffer) -> bool:
    return buf.scope is Scope.VAR or (buf.ndim == 0 and buf.scope is not Scope.GLOBAL)


def _below_pair(c: Call):
    """(a, b) when c is `a >= 0 and a < b` for signed integers a, b of one dtype and b not
    a constant (LLVM folds that pair itself), which the runtime's `_below` computes as one
    comparison (the same truth value), else None."""
    if c.op is not Op.AND:
        return None
    lo, hi = c.args
    if not (isinstance(lo, Call) and lo.op is Op.GE and isinstance(hi, Call)
            and hi.op is Op.LT):
        return None
    a, zero = lo.args
    if not (isinstance(zero, Const) and zero.value == 0 and hi.args[0] == a):
        return None
    b = hi.args[1]
    ok = not isinstance(b, Const) and a.dtype == b.dtype and a.dtype.kind == "int" \
        and a.dtype.bits in (32, 64)
    return (a, b) if ok else None


def _call_arg(s: str, fn: str) -> str | None:
    """The argument text of `s` when `s` is exactly one call `fn(...)`, else None."""
    if not (s.startswith(fn + "(") and s.endswith(")")):
        return None
    depth = 0
    for i in range(len(fn), len(s)):
        depth += {"(": 1, ")": -1}.get(s[i], 0)
        if depth == 0:
            return s[len(fn) + 1:-1] if i == len(s) - 1 else None
    return None

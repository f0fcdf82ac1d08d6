"""Every op of the table, every dtype, in the JIT and the interpreter: identical bits.

Two kernels per input dtype: one applies every op that accepts it, the other every cast
(plain and saturating) to every dtype and the same-width reinterprets; hypothesis varies the
data (NaN, inf, -0.0, subnormals, whole integer ranges). The py tier runs both for every
dtype; the numba tier compiles a representative set in CI and all of them under the
`thorough` profile.
"""

from __future__ import annotations

import builtins
import dataclasses
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilepy.jit as jit
from tests.jit.oracle import assert_same_bits, both
from tests.strategies import arrays, c, call
from tilepy.errors import TileTypeError
from tilepy.ir.expr import Buffer, Call, Load, Var
from tilepy.ir.ops import OPS, Compute, Op, called, result_dtype
from tilepy.ir.stmt import For, ForKind, Launch, PrimFunc, Store
from tilepy.ir.types import bool_, dtype
from tilepy.precision.formats import FORMATS

ALL = [n for n in FORMATS]


def _applicable(dt, arity):
    out = []
    for op, row in OPS.items():
        if row.arity != arity or row.compute is Compute.CONVERT or op is Op.SELECT:
            continue
        try:
            out.append((op, result_dtype(op, (dt,) * arity)))
        except TileTypeError:
            pass
    return out


PARTS = ("ops", "casts")


def _outputs(dt, part):
    """(name, builder(x, y, cond) -> Expr, is an F64 op) for every op ("ops") or every
    cast and reinterpret ("casts") of dt."""
    return _op_outputs(dt) if part == "ops" else _cast_outputs(dt)


def _op_outputs(dt):
    outs = []
    for arity in (1, 2):
        for op, _ in _applicable(dt, arity):
            f64 = OPS[op].compute is Compute.F64
            outs.append((f"o_{op}", lambda x, y, cnd, op=op, n=arity: call(op, *(x, y)[:n]),
                         f64))
    outs.append(("o_select", lambda x, y, cnd: call(Op.SELECT, cnd, x, y), False))
    return outs


def _cast_outputs(dt):
    outs = []
    for name in ALL:
        d = dtype(name)
        outs.append((f"cast_{name}", lambda x, y, cnd, d=d: Call(Op.CAST, (x,), d), False))
        if d.is_float:
            outs.append((f"sat_{name}", lambda x, y, cnd, d=d: Call(Op.CAST_SAT, (x,), d),
                         False))
        if (d.bits == dt.bits and d != dt and d.bits < 64 and not d.is_bool
                and not dt.is_bool):
            outs.append((f"re_{name}", lambda x, y, cnd, d=d: Call(Op.REINTERPRET, (x,), d),
                         False))
    return outs


_KERNELS: dict[tuple[str, str], tuple] = {}


def op_kernel(name: str, part: str):
    """The kernel applying every op (part "ops") or every cast ("casts") to X (and Y),
    elementwise over N."""
    if (name, part) in _KERNELS:
        return _KERNELS[name, part]
    dt = dtype(name)
    N, g = Var("N"), Var("g")
    X, Y, C = Buffer("X", (N,), dt), Buffer("Y", (N,), dt), Buffer("C", (N,), bool_)
    x, y, cnd = Load(X, (g,)), Load(Y, (g,)), Load(C, (g,))
    outs, stores, f64 = [], [], set()
    for oname, build, is_f64 in _outputs(dt, part):
        e = build(x, y, cnd)
        buf = Buffer(oname, (N,), e.dtype)
        outs.append(buf)
        stores.append(Store(buf, (g,), e))
        if is_f64:
            f64.add(oname)
    launch = Launch((N,), (g,), (128,), tuple(stores))
    func = PrimFunc(f"{part}_{name}", (X, Y, C, *outs), (N,), (launch,))
    _KERNELS[name, part] = (func, f64)
    return _KERNELS[name, part]


def _check(name: str, part: str, xs, ys, cs, tier: str, only=None) -> None:
    func, f64 = op_kernel(name, part)
    n = len(xs)
    arrs = {"X": xs, "Y": ys, "C": cs}
    for p in func.params[3:]:
        arrs[p.name] = np.zeros(n, dtype=p.dtype.np_dtype)
    a, b = both(func, arrs, {"N": n}, tier)
    for p in func.params[3:]:
        if only is None or p.name == only:
            ulp = 1 if p.name in f64 and p.dtype.name == "float64" else 0
            assert_same_bits(a[p.name], b[p.name], f"{name} {p.name}", ulp=ulp)


def _data(name: str):
    return st.integers(1, 40).flatmap(
        lambda n: st.tuples(arrays(name, (n,)), arrays(name, (n,)), arrays("bool", (n,))))


@pytest.mark.parametrize("name", ALL)
@given(data=st.data())
@settings(max_examples=8)
def test_every_op_py_tier(name, data):
    xs, ys, cs = data.draw(_data(name))
    for part in PARTS:
        _check(name, part, xs, ys, cs, "py")


# A compile costs about 1.5 s per output here (a cast kernel has ~40), so CI compiles the
# ops of a representative set of dtypes and the casts of float32 and bfloat16 (the py tier
# above runs the same source for every dtype and part); `thorough` compiles them all.
NUMBA_CI = [(n, "ops") for n in ("float32", "float64", "bfloat16", "float8_e4m3fn", "int32")]
NUMBA_CI += [("float32", "casts"), ("bfloat16", "casts")]
NUMBA_ALL = [(n, p) for n in ALL for p in PARTS]
NUMBA_CASES = NUMBA_ALL if os.environ.get("TILEPY_HYPOTHESIS_PROFILE") == "thorough" else NUMBA_CI


@pytest.mark.parametrize("name, part", NUMBA_CASES)
@given(data=st.data())
@settings(max_examples=15)
def test_every_op_numba(name, part, data):
    xs, ys, cs = data.draw(_data(name))
    _check(name, part, xs, ys, cs, "numba")


@pytest.mark.parametrize("tier", ["py", "numba"])
@pytest.mark.parametrize("name", ["float64", "float32"])
def test_softplus_agrees_where_it_needs_care(name, tier):
    """T.softplus on |x| up to 800, where log(1 + e ** x) overflows or loses e ** x and
    its helper's two branches meet; the op kernels of the tests above (no new compile).
    Float32 results are bit-identical, float64 ones within the 1 ulp of libm vs numpy."""
    x = np.concatenate([np.linspace(-800.0, 800.0, 321), [36.7, 37.0, -745.2, -746.0, 709.8,
                                                         710.0, 1e300, -1e300, 5e-324]])
    with np.errstate(over="ignore"):
        xs = x.astype(name)
    cs = np.arange(len(x)) % 3 == 0
    _check(name, "ops", xs, xs[::-1].copy(), cs, tier, only="o_softplus")


def test_float_to_int64_saturates():
    """float -> int64/uint64 truncates, clamps, NaN -> 0 (ir/ops.py cast_values' documented
    rule; its numpy form overflows at 2**63 and gives INT64_MIN or MAX by array length)."""
    from tilepy.ir.types import float64

    N, g = Var("N"), Var("g")
    X = Buffer("X", (N,), float64)
    outs = (Buffer("I", (N,), dtype("int64")), Buffer("U", (N,), dtype("uint64")))
    stores = tuple(Store(o, (g,), Call(Op.CAST, (Load(X, (g,)),), o.dtype)) for o in outs)
    func = PrimFunc("f2i64", (X, *outs), (N,), (Launch((N,), (g,), (1,), stores),))
    x = np.array([np.inf, -np.inf, np.nan, 1e19, -1e19, 3.9, -3.9, 2.0**63, 2.0**64, 0.0])
    imax, imin, umax = 2**63 - 1, -2**63, 2**64 - 1
    want_i = np.array([imax, imin, 0, imax, imin, 3, -3, imax, imax, 0], dtype=np.int64)
    want_u = np.array([umax, 0, 0, 10**19, 0, 3, 0, 2**63, umax, 0], dtype=np.uint64)
    for tier in ("py", "numba"):
        arrs = {"X": x, "I": np.zeros(10, np.int64), "U": np.zeros(10, np.uint64)}
        jit.run(func, arrs, {"N": 10}, tier=tier)
        np.testing.assert_array_equal(arrs["I"], want_i)
        np.testing.assert_array_equal(arrs["U"], want_u)


def test_saturating_cast_to_float64_clamps_infinities():
    """CAST_SAT to float64 clamps +-inf to +-max (precision.cast's documented rule). The
    reference clips float32 values with a float64 bound that numpy rounds to inf, so it
    keeps inf; the JIT follows the documented rule."""
    N, g = Var("N"), Var("g")
    X, O = Buffer("X", (N,), dtype("float32")), Buffer("O", (N,), dtype("float64"))
    st_ = Store(O, (g,), Call(Op.CAST_SAT, (Load(X, (g,)),), O.dtype))
    func = PrimFunc("sat64", (X, O), (N,), (Launch((N,), (g,), (1,), (st_,)),))
    x = np.array([np.inf, -np.inf, np.nan, 1.5, -0.0], dtype=np.float32)
    big = np.finfo(np.float64).max
    for tier in ("py", "numba"):
        arrs = {"X": x, "O": np.zeros(5)}
        jit.run(func, arrs, {"N": 5}, tier=tier)
        np.testing.assert_array_equal(arrs["O"], [big, -big, np.nan, 1.5, -0.0])


def _tier_namespaces() -> dict:
    """(tier, fast) -> the names a kernel's source can call there."""
    from tilepy.jit import fast
    from tilepy.jit.runtime import numba_namespace, py_namespace

    out = {}
    for tier, ns in (("py", py_namespace(())), ("numba", numba_namespace(()))):
        out[tier, False] = ns
        out[tier, True] = {**ns, **fast.namespace(tier)}
    return out


def test_every_function_a_scalar_form_calls_is_bound_in_both_tiers():
    """The JIT's namespaces come from the op table: whatever a row's scalar, to32 or fast
    form calls (`_log`, `math.exp`, `_exp_to32`, `_fexp32`) is bound in the py and numba
    tiers; a message names the op, the form and the tier that lacks it."""
    missing = []
    for (tier, fast), ns in _tier_namespaces().items():
        for row in OPS.values():
            if row.compute is Compute.CONVERT:
                continue
            forms = {"scalar": row.scalar, "to32": row.to32, "fast": row.fast if fast else None}
            for form, tmpl in forms.items():
                for fn in called(tmpl) if tmpl else ():
                    mod, _, attr = fn.rpartition(".")
                    where = ns.get(mod) if mod else ns
                    bound = hasattr(where, attr) if mod else attr in ns or hasattr(builtins, fn)
                    if not bound:
                        missing.append(f"{row.label}: its {form} form calls {fn}, which the "
                                       f"{tier} tier{' (fast)' if fast else ''} lacks")
    assert missing == []


def test_the_py_tiers_math_and_helpers_are_the_rows_functions(monkeypatch):
    """A row whose scalar form calls a `math` function or a helper brings its py-tier
    function with it (a new `math.log1p` once crashed the hand-kept py-tier namespace)."""
    from tilepy.ir import ops
    from tilepy.jit.runtime import py_namespace

    row = OPS[Op.LOG]
    monkeypatch.setitem(ops.CALLS, "math.log1p", dataclasses.replace(
        row, scalar="math.log1p({0})", helper=math.log1p, py=np.log1p))
    monkeypatch.setitem(ops.CALLS, "_log1p", dataclasses.replace(
        row, scalar="_log1p({0})", helper=np.log1p, py=np.log1p))
    ns = py_namespace(())
    assert ns["math"].log1p is np.log1p and ns["_log1p"] is np.log1p
    assert ns["math"].erf is OPS[Op.ERF].py and ns["_log"] is row.py


def test_a_rounded_narrow_store_is_encoded_once():
    """enc(rnd(x)) == enc(x) for every narrow float format (rnd is dec(enc(x)) and a
    code's decoded value encodes to that code), so a store of a rounded value encodes
    its operand once; the generated source says so, the bits are the interpreter's."""
    from tilepy.precision import decode, encode

    rng = np.random.default_rng(18)
    bits = np.concatenate([rng.integers(0, 2**32, 1 << 16, dtype=np.uint64),
                           np.arange(0, 2**32, 2**16 - 1, dtype=np.uint64)])
    x = bits.astype(np.uint32).view(np.float32)  # NaN payloads, infinities, subnormals
    x = np.concatenate([x, np.float32([0.0, -0.0, 1e-45, 448.0, 464.0, 57344.0, 6.0, 7.0])])
    for name, f in FORMATS.items():
        if f.kind != "float" or f.bits >= 32:
            continue
        with np.errstate(all="ignore"):
            once = encode(x, name)
            twice = encode(decode(once, name).astype(np.float32), name)
        assert np.array_equal(once, twice), name
    X, Y = Buffer("X", (Var("N"),), dtype("bfloat16")), Buffer("Y", (Var("N"),),
                                                               dtype("bfloat16"))
    i = Var("i")
    total = Call(Op.ADD, (Load(X, (i,)), Load(X, (i,))), dtype("bfloat16"))
    body = (For(i, c(0), Var("N"), c(1), ForKind.SERIAL, (Store(Y, (i,), total),)),)
    f = PrimFunc("twice_bf16", (X, Y), (Var("N"),), (Launch((c(1),), (Var("b"),), (1,),
                                                            body),))
    src = jit.source(f)
    assert "_enc_bfloat16(_rnd_bfloat16(" not in src and "_enc_bfloat16(" in src
    codes = np.concatenate([np.arange(0, 2**16, 7), [0x7F80, 0xFF80, 0x7FC1, 0x7F7F]])
    xs = codes.astype(np.uint16).view(FORMATS["bfloat16"].np_dtype)
    want, got = both(f, {"X": xs, "Y": np.zeros_like(xs)}, {"N": xs.size}, tier="py")
    assert_same_bits(want["Y"], got["Y"], "Y")

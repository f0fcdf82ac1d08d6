"""Every scalar op, run as a kernel in the interpreter, against an independent numpy
formulation of the numerics contract (never against tilepy's own op table).

Independent means: float32/float64 ops are numpy's IEEE ops; narrow floats compute in
float32 and round once with ml_dtypes' float32 -> narrow cast (a single rounding);
transcendentals are numpy's float64 functions rounded once by `round_once` below, which
finds the nearest value of the format among the neighbours of a candidate by float64
distance (ties to the even code). Data include NaN, inf, -0.0 and subnormals.
"""

import functools
import math
from decimal import Decimal, localcontext

import ml_dtypes
import numpy as np
import pytest
import scipy.special
from hypothesis import given
from hypothesis import strategies as st

import tilepy
import tilepy.language as T
from tests.strategies import arrays

N = 32
FLOATS = ["float32", "bfloat16", "float16", "float64"]
NARROW = ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"]


@functools.lru_cache(maxsize=None)
def _kernel(fn, dtype, arity, out_dtype=None):
    out_dtype = out_dtype or dtype

    if arity == 1:
        @T.prim_func
        def unary(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), out_dtype)):
            with T.Kernel(1) as _:
                for i in T.Parallel(N):
                    Y[i] = fn(X[i])
        return unary

    @T.prim_func
    def binary(X: T.Tensor((N,), dtype), Z: T.Tensor((N,), dtype), Y: T.Tensor((N,), out_dtype)):
        with T.Kernel(1) as _:
            for i in T.Parallel(N):
                Y[i] = fn(X[i], Z[i])
    return binary


def _run(kernel, *inputs, out_dtype):
    out = np.zeros(N, np.dtype(out_dtype))
    with tilepy.backend("interp"):
        kernel(*inputs, out)
    return out


def round_once(x64: np.ndarray, dtype) -> np.ndarray:
    """float64 values rounded once to `dtype` (nearest, ties to even), independently of
    tilepy: the answer is one of the neighbours of ml_dtypes' (maybe doubly rounded) cast."""
    dt = np.dtype(dtype)
    bits = dt.itemsize * 8
    ui = np.dtype(f"uint{bits}")
    guess = x64.astype(dt)
    out = guess.copy()
    for idx in np.ndindex(x64.shape):
        x = x64[idx]
        if not math.isfinite(x):
            continue
        code = int(guess[idx:idx + 1].view(ui)[0]) if guess.ndim == 0 else int(
            guess[idx].reshape(1).view(ui)[0])
        cands = []
        for c in (code - 1, code, code + 1):
            if 0 <= c < (1 << bits):
                v = np.array([c], ui).view(dt)
                fv = float(v.astype(np.float64)[0])
                if math.isfinite(fv):
                    cands.append((abs(fv - x), c & 1, c, v[0]))
        if not cands:
            continue
        best = min(cands)
        if math.isfinite(float(guess[idx])) or abs(x) <= float(ml_dtypes.finfo(dt).max):
            out[idx] = best[3]
    return out


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    g, w = got.astype(np.float64), want.astype(np.float64)
    both_nan = np.isnan(g) & np.isnan(w)
    same = (g == w) & (np.signbit(g) == np.signbit(w))
    return bool(np.all(both_nan | same))


ARITH = {
    "add": (lambda a, b: a + b, np.add), "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply), "div": (lambda a, b: a / b, np.divide),
}


@pytest.mark.parametrize("dtype", FLOATS + NARROW)
@pytest.mark.parametrize("name", list(ARITH))
@given(data=st.data())
def test_arithmetic_rounds_once_per_op(name, dtype, data):
    fn, ref = ARITH[name]
    x, z = data.draw(arrays(dtype, N)), data.draw(arrays(dtype, N))
    got = _run(_kernel(fn, dtype, 2), x, z, out_dtype=dtype)
    wide = np.float64 if dtype == "float64" else np.float32
    with np.errstate(all="ignore"):
        want = ref(x.astype(wide), z.astype(wide)).astype(np.dtype(dtype))
    assert _same(got, want), (x, z, got, want)


def _first_max(a, b):
    return np.where(np.isnan(a) | np.isnan(b), np.nan, np.where(a >= b, a, b))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@given(data=st.data())
def test_max_min_propagate_nan_and_keep_first_on_ties(dtype, data):
    x, z = data.draw(arrays(dtype, N)), data.draw(arrays(dtype, N))
    got = _run(_kernel(T.max, dtype, 2), x, z, out_dtype=dtype)
    want = np.array([_py_max(a, b) for a, b in zip(x.astype(float), z.astype(float))])
    assert _same(got, want.astype(np.dtype(dtype)))


def _py_max(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.nan
    return a if a >= b else b


MATH = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "tanh": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "erf": scipy.special.erf,
    "sin": np.sin, "cos": np.cos, "softplus": lambda x: np.logaddexp(0.0, x),
}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("name", list(MATH))
@given(data=st.data())
def test_transcendentals_in_float64_rounded_once(name, dtype, data):
    x = data.draw(arrays(dtype, N))
    got = _run(_kernel(getattr(T, name), dtype, 1), x, out_dtype=dtype)
    with np.errstate(all="ignore"):
        want = round_once(MATH[name](x.astype(np.float64)), dtype)
    assert _same(got, want), (x, got, want)


def _softplus_exact(x: float) -> Decimal:
    """log(1 + e ** x) to about 50 digits: max(x, 0) + log(1 + t), t = e ** -|x| (the series
    t - t**2/2 + t**3/3 where 1 + t would lose t)."""
    with localcontext() as ctx:
        ctx.prec = 60
        d = Decimal(x)  # exact
        t = (-abs(d)).exp()
        log1p = t - t * t / 2 + t * t * t / 3 if t < Decimal("1e-25") else (1 + t).ln()
        return max(d, Decimal(0)) + log1p


def _nearest(value: Decimal, dtype) -> float:
    """The value of `dtype` nearest to `value` (float32: among float64's guess and its
    neighbours, so the rounding is once, from the exact value)."""
    guess = np.asarray(float(value), dtype)
    cands = [guess, np.nextafter(guess, dtype(np.inf)), np.nextafter(guess, dtype(-np.inf))]
    return float(min(cands, key=lambda c: abs(Decimal(float(c)) - value)))


SOFTPLUS_X = np.concatenate([
    np.linspace(-800.0, 800.0, 161), np.random.default_rng(5).uniform(-40.0, 40.0, 100),
    np.random.default_rng(6).standard_normal(60),
    [0.0, -0.0, 1e-300, -1e-300, 5e-324, 1e-8, -1e-8, 16.6, -16.6, 36.0, 36.7, 37.0, -88.7,
     -103.9, 709.0, 710.0, -708.0, -745.0, -746.0, 1e300, -1e300]])


def test_softplus_against_a_high_precision_reference():
    """T.softplus in float64 is within 2.5 ulp of log(1 + e ** x) (its helper's log1p and
    exp are within an ulp each, log1p's condition number is at most 1, and x + log1p(...)
    rounds once more), also where the plain formula overflows (x > 709) or rounds e ** x
    away (x < -37); float32 results are the exact value rounded once, as the contract
    says. Its helper in plain Python (the JIT's py tier) is held to the same bound."""
    from tilepy.ir.scalar import _softplus

    n = len(SOFTPLUS_X) + 3
    x64 = np.concatenate([SOFTPLUS_X, [np.inf, -np.inf, np.nan]])
    x32 = np.where(np.isfinite(x64), np.clip(x64, -1e38, 1e38), x64).astype(np.float32)
    got64 = _kernel_n(T.softplus, "float64", n)(x64, np.zeros(n))
    got32 = _kernel_n(T.softplus, "float32", n)(x32, np.zeros(n, np.float32))
    for got in (got64[-3:], got32[-3:], [_softplus(v) for v in x64[-3:]]):
        assert got[0] == np.inf and got[1] == 0.0 and np.isnan(got[2])
    for i in range(n - 3):
        e = _softplus_exact(float(x64[i]))
        ulp = Decimal(float(np.spacing(np.float64(float(e)))))
        for got in (got64[i], _softplus(x64[i])):
            assert abs(Decimal(float(got)) - e) <= Decimal("2.5") * ulp, (x64[i], got, e)
        e32 = _softplus_exact(float(x32[i]))
        assert got32[i] == _nearest(e32, np.float32), (x32[i], got32[i], e32)


@functools.lru_cache(maxsize=None)
def _kernel_n(fn, dtype, n):
    """fn applied elementwise over n values of dtype, run in the interpreter."""
    @T.prim_func
    def unary(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype)):
        with T.Kernel(1) as _:
            for i in T.Parallel(n):
                Y[i] = fn(X[i])

    def run(x, y):
        with tilepy.backend("interp"):
            unary(x, y)
        return y

    return run


def _caster(dst):
    return lambda v: T.cast(v, dst)


CASTS = {d: _caster(d) for d in ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"]}


@pytest.mark.parametrize("dst", list(CASTS))
@given(data=st.data())
def test_float32_casts_round_to_nearest_even(dst, data):
    x = data.draw(arrays("float32", N))
    got = _run(_kernel(CASTS[dst], "float32", 1, dst), x, out_dtype=dst)
    with np.errstate(over="ignore"):
        want = x.astype(np.dtype(dst))  # ml_dtypes' float32 cast rounds once
    assert _same(got, want)


INT_OPS = {
    "floordiv": (lambda a, b: a // b,
                 lambda a, b: np.where(b == 0, 0, a // np.where(b == 0, 1, b))),
    "mod": (lambda a, b: a % b, lambda a, b: np.where(b == 0, 0, a % np.where(b == 0, 1, b))),
    "and": (lambda a, b: a & b, np.bitwise_and), "xor": (lambda a, b: a ^ b, np.bitwise_xor),
    "add": (lambda a, b: a + b, np.add), "mul": (lambda a, b: a * b, np.multiply),
}


@pytest.mark.parametrize("dtype", ["int32", "int8"])
@pytest.mark.parametrize("name", list(INT_OPS))
@given(data=st.data())
def test_integer_ops_wrap_and_floor(name, dtype, data):
    fn, ref = INT_OPS[name]
    x, z = data.draw(arrays(dtype, N)), data.draw(arrays(dtype, N))
    got = _run(_kernel(fn, dtype, 2), x, z, out_dtype=dtype)
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.int64), z.astype(np.int64))
    bits = np.dtype(dtype).itemsize * 8
    want = ((want + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))  # two's complement
    assert np.array_equal(got.astype(np.int64), want)


TO_INT8 = lambda v: T.cast(v, "int8")  # noqa: E731


@given(data=st.data())
def test_float_to_int_truncates_and_saturates(data):
    x = data.draw(arrays("float32", N))
    got = _run(_kernel(TO_INT8, "float32", 1, "int8"), x, out_dtype="int8")
    want = np.clip(np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0)), -128, 127)
    assert np.array_equal(got.astype(np.float64), want)

"""The JIT's vectorising paths keep the interpreter's bits: the float64 `exp` of jit/mathlib.py
(results rounded to float32 or narrower), max/min reductions as integer reductions over
order keys (runtime._extreme), and loads read once before a loop (jit/passes/hoist.py).

Each test feeds the cases where a shortcut would show: NaN, infinities, signed zeros,
values at the float32 overflow and underflow edges, lengths that are not a multiple of
8, loops that write the buffer they read, and reads that only happen under a condition.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import erf as _scipy_erf

import tilepy
import tilepy.language as T
from tests.jit.oracle import assert_agree, assert_same_bits, bits
from tilepy.ir.ops import OPS, Op

# ------------------------------------------------------------------ exp (jit/mathlib.py)

EDGES = np.array([
    0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-300, -1e-300, 5e-324,
    88.72283172607422, 88.72283935546875, 88.7228, 89.0, 709.0, 710.0, 1e300,
    -87.33654022216797, -103.27892303466797, -103.97207641601562, -104.0, -104.5,
    -150.0, -200.0, -201.0, 200.0, 201.0, -745.2, -1e300,
    0.34657359027997264, -0.34657359027997264, 0.6931471805599453,
], dtype=np.float64)


def _elementwise(name: str, fastmath: bool = False):
    import numba

    from tilepy.jit.mathlib import numba_math

    f = numba_math()[name]

    @numba.njit(fastmath=fastmath)
    def each(x, out):
        for i in range(x.shape[0]):
            out[i] = f(x[i])

    def run(x):
        out = np.empty_like(x)
        each(x, out)
        return out

    return run


@pytest.fixture(scope="module")
def exp_to32():
    return _elementwise("_exp_to32")


@pytest.fixture(scope="module")
def exp2_to32():
    return _elementwise("_exp2_to32")


def test_exp2_is_within_one_ulp_and_rounds_to_float32_correctly(exp2_to32):
    rng = np.random.default_rng(17)
    x = np.concatenate([rng.uniform(-160.0, 135.0, 1 << 20), rng.uniform(-1, 1, 1 << 18),
                        np.arange(-160, 140, 0.5)])  # integers and halves: the r = 0, 1/2 ends
    got = exp2_to32(x)
    true = np.exp2(x.astype(np.longdouble))
    err = np.abs((got.astype(np.longdouble) - true) / np.spacing(got).astype(np.longdouble))
    assert float(err.max()) < 1.1, float(err.max())
    with np.errstate(over="ignore"):
        x32 = np.concatenate([(rng.standard_normal(1 << 21) * 40).astype(np.float32),
                              EDGES.astype(np.float32), np.float32([-149.5, -150, 128, 127.99])])
        g32 = exp2_to32(x32.astype(np.float64)).astype(np.float32)
        w32 = np.exp2(x32.astype(np.longdouble)).astype(np.float32)
    nan = np.isnan(x32)
    assert np.array_equal(bits(g32[~nan]), bits(w32[~nan]))
    assert np.isnan(g32[nan]).all()


def test_exp_is_within_one_ulp_of_float64_on_the_float32_range(exp_to32):
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-110.0, 95.0, 1 << 20), rng.uniform(-1, 1, 1 << 18),
                        EDGES[np.isfinite(EDGES) & (np.abs(EDGES) < 200)]])
    got = exp_to32(x)
    true = np.exp(x.astype(np.longdouble))  # long double: 11 more bits than the result
    err = np.abs((got.astype(np.longdouble) - true) / np.spacing(got).astype(np.longdouble))
    assert float(err.max()) < 1.05, float(err.max())
    assert 0.2 < float(err.mean()) < 0.35  # a real approximation, not a copy of libm


def test_exp_rounded_to_float32_is_the_correctly_rounded_result(exp_to32):
    rng = np.random.default_rng(8)
    with np.errstate(over="ignore"):
        x32 = np.concatenate([(rng.standard_normal(1 << 21) * 30).astype(np.float32),
                              rng.uniform(-104.5, 89.5, 1 << 20).astype(np.float32),
                              EDGES.astype(np.float32)])
        x = x32.astype(np.float64)
        got = exp_to32(x).astype(np.float32)
        want = np.exp(x.astype(np.longdouble)).astype(np.float32)
    nan = np.isnan(x)
    assert np.array_equal(bits(got[~nan]), bits(want[~nan]))
    assert np.isnan(got[nan]).all()


@pytest.mark.exhaustive
def test_exp_rounded_to_float32_is_the_interpreters_on_every_float32_argument():
    """Every float32 x in [-104, 89] (2,239,889,410; beyond, the float32 result is 0 or
    inf on both sides): the JIT's float32 exp equals numpy's float64 exp rounded to float32,
    the interpreter's, so exact-mode exp never depends on the backend (1-4 minutes)."""
    import numba

    from tilepy.jit.mathlib import numba_math

    f = numba_math()["_exp_to32"]

    @numba.njit
    def to32(x, out):
        for i in range(x.shape[0]):
            out[i] = np.float32(f(np.float64(x[i])))

    bad, chunk = 0, 1 << 24
    for lo, hi in ((0x80000000, int(np.float32(-104.0).view(np.uint32))),
                   (0, int(np.float32(89.0).view(np.uint32)))):
        for s in range(lo, hi + 1, chunk):
            x = np.arange(s, min(s + chunk, hi + 1), dtype=np.uint64).astype(np.uint32)
            x = x.view(np.float32)
            got = np.empty_like(x)
            to32(x, got)
            with np.errstate(over="ignore"):
                want = np.exp(x.astype(np.float64)).astype(np.float32)
            bad += int(np.count_nonzero(bits(got) != bits(want)))
    assert bad == 0


@pytest.fixture(scope="module")
def tanh_to32():
    return _elementwise("_tanh_to32")


TANH_EDGES = np.array([0.0, -0.0, 1e-300, -1e-300, 5e-324, -5e-324, 1e-9, 0.17328679513998632,
                       0.1732867951399863, 0.5, 9.010913, 17.999, 18.0, 18.5, 20.0, -25.0,
                       1e300, -1e300, np.inf, -np.inf], dtype=np.float64)


def test_tanh_is_within_three_ulp_of_float64_and_rounds_to_float32_correctly(tanh_to32):
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.uniform(-19.0, 19.0, 1 << 20), rng.uniform(-1, 1, 1 << 18),
                        rng.uniform(-1e-4, 1e-4, 1 << 16), TANH_EDGES])
    got = tanh_to32(x)
    true = np.tanh(x.astype(np.longdouble))
    below = np.abs(x) < 17.9  # above, the clamp's 1 - 4.6e-16 (1.0 in float32) is not tanh
    err = np.abs((got[below].astype(np.longdouble) - true[below])
                 / np.spacing(got[below]).astype(np.longdouble))
    assert float(err.max()) < 2.6, float(err.max())
    assert 0.3 < float(err.mean()) < 1.0  # a real approximation, not a copy of libm
    with np.errstate(over="ignore"):  # +-1e300: +-inf in float32
        x32 = np.concatenate([(rng.standard_normal(1 << 21) * 3).astype(np.float32),
                              rng.uniform(-10, 10, 1 << 20).astype(np.float32),
                              TANH_EDGES.astype(np.float32)])
    g32 = tanh_to32(x32.astype(np.float64)).astype(np.float32)
    w32 = np.tanh(x32.astype(np.longdouble)).astype(np.float32)
    assert np.array_equal(bits(g32), bits(w32))  # signed zeros, +-1 and tiny values too
    nan = np.array([np.nan, -np.nan], dtype=np.float64)
    nan.view(np.uint64)[0] |= np.uint64(12345)
    assert np.array_equal(bits(tanh_to32(nan)), bits(nan))


@pytest.fixture(scope="module")
def erf_to32():
    return _elementwise("_erf_to32")


def _libm_erf():
    import math

    import numba

    @numba.njit
    def each(x, out):
        for i in range(x.shape[0]):
            out[i] = math.erf(x[i])

    def run(x):
        out = np.empty_like(x)
        each(x, out)
        return out

    return run


ERF_EDGES = np.array([0.0, -0.0, 5e-324, -5e-324, 1e-45, 1e-300, 0.5, 0.99999994, 1.0,
                      1.0000001, -1.0000001, 2.5, 3.9, 3.92, 3.9999998, 4.0, 4.0000005, 6.0,
                      -30.0, 1e30, np.inf, -np.inf], dtype=np.float64)


def test_erf_is_within_two_ulp_of_libm_and_rounds_to_float32_as_libm_does(erf_to32):
    """Exact mode's float32 erf (bench/erf_fit.py measured it within 1.4 float64 ulp of
    the true erf, and libm's within 1; both round to the correctly rounded float32 on
    every float32 input). Here: float32 inputs, dense around the branch point 1 and the
    clamp at 4, and tiny values, against libm's erf."""
    libm = _libm_erf()
    rng = np.random.default_rng(12)
    x32 = np.concatenate([rng.uniform(-4.5, 4.5, 1 << 21), rng.uniform(0.99, 1.01, 1 << 16),
                          rng.uniform(3.9, 4.1, 1 << 14), 10.0 ** rng.uniform(-45, 0, 1 << 14),
                          ERF_EDGES]).astype(np.float32)
    x = x32.astype(np.float64)
    got, want = erf_to32(x), libm(x)
    inside = np.abs(x) < 4.0  # beyond: the clamp at 4, whose float32 result is 1
    err = np.abs(got[inside] - want[inside]) / np.spacing(np.abs(want[inside]))
    assert float(err.max()) <= 2.5, float(err.max())
    assert float(err.mean()) > 0.05  # an approximation, not a copy of libm
    assert np.array_equal(bits(got.astype(np.float32)), bits(want.astype(np.float32)))
    nan = np.array([np.nan, -np.nan], dtype=np.float64)
    nan.view(np.uint64)[0] |= np.uint64(12345)
    assert np.array_equal(bits(erf_to32(nan)), bits(nan))


@pytest.mark.parametrize("name", ["_exp_to32", "_exp2_to32"])
def test_fast_math_flags_do_not_undo_the_range_reduction(name):
    """Fast kernels inline the same functions under fast-math flags (reassociation would
    cancel an `(x + 1.5 * 2**52) - 1.5 * 2**52` rounding and give errors of whole units);
    the flags may move the last bit, not more."""
    x = np.random.default_rng(4).uniform(-100.0, 80.0, 1 << 16)
    got = _elementwise(name, fastmath=True)(x)
    xl = x.astype(np.longdouble)
    true = np.exp(xl) if name == "_exp_to32" else np.exp2(xl)
    err = np.abs((got.astype(np.longdouble) - true) / np.spacing(got).astype(np.longdouble))
    assert float(err.max()) < 1.5, float(err.max())


def _fast_form(op: Op):
    """The op table's fast form of `op` for float32 x, as fast kernels inline it."""
    import numba

    from tilepy.jit.mathlib import fast_numba_math

    ns = {"np": np, **fast_numba_math()}
    exec(f"def form(x):\n    return {OPS[op].fast.format('np.float32(x)')}", ns)
    f = numba.njit(inline="always")(ns["form"])

    @numba.njit(fastmath=True)
    def each(x, out):
        for i in range(x.shape[0]):
            out[i] = f(x[i])

    return each


_EXP_EDGES = [88.72283, 88.72284, -87.33655, -103.27893, -103.97208, 127.99999, 128.0,
              -126.0, -149.0, -149.5, -150.0]
# per fast form: its true function and the range where its values are finite (fast mode
# assumes no inf or NaN), with the points where a shortcut would show
FAST_CASES = {
    Op.EXP: (np.exp, -104.5, 89.5, _EXP_EDGES),
    Op.EXP2: (np.exp2, -151.5, 129.5, _EXP_EDGES),
    Op.SIGMOID: (lambda x: 1 / (1 + np.exp(-x)), -88.0, 104.0, [-88.0, -16.6433, 0.0, 17.0]),
    Op.ERF: (lambda x: _scipy_erf(x.astype(np.float64)).astype(np.longdouble), -4.5, 4.5,
             [0.0, -0.0, 1.0, -1.0, 1.0000001, 0.99999994, 3.9, 4.0, 50.0, -1e30, 1e-30,
              1e-40, -1e-40, 0.93749994, 0.9375, -0.9375, 0.9368423, 3.9192057, 3.919206]),
}


def test_every_fast_form_is_measured_here():
    assert {op for op, row in OPS.items() if row.fast} == set(FAST_CASES)


@pytest.mark.parametrize("op", list(FAST_CASES), ids=str)
def test_fast_float32_forms_are_within_their_rows_ulps(op):
    """Fast mode's float32 forms (the op table's `fast`, calling jit/mathlib.py's float32
    exp/exp2), inlined under fast-math as fast kernels inline them: within the row's
    fast_ulps of the true value wherever the float32 result is finite (normal or
    subnormal, in units of the correctly rounded result's ulp), inf where it overflows, 0
    far below the subnormals. tilepy.kernels.checks charges each 2 * fast_ulps units of
    2**-24."""
    ref, lo, hi, edges = FAST_CASES[op]
    ulps = OPS[op].fast_ulps
    rng = np.random.default_rng(21)
    x = np.concatenate([rng.uniform(lo, hi, 1 << 21), rng.uniform(-1, 1, 1 << 18),
                        np.arange(np.ceil(lo), hi, 0.5),  # exp2: r = 0 and r = +-1/2
                        np.float32(edges)]).astype(np.float32)
    got = np.empty_like(x)
    _fast_form(op)(x, got)
    with np.errstate(over="ignore"):
        true = ref(x.astype(np.longdouble))
        t32 = true.astype(np.float32)
    fin = np.isfinite(t32) & (t32 != 0)
    ulp = np.spacing(np.abs(t32[fin])).astype(np.longdouble)
    err = np.abs(got[fin].astype(np.longdouble) - true[fin]) / ulp
    assert float(err.max()) <= ulps, float(err.max())
    assert float(err.max()) > 0.5  # an approximation, not a correctly rounded copy
    top = np.float32(np.finfo(np.float32).max)
    assert np.all((got[np.isinf(t32)] == np.inf) | (got[np.isinf(t32)] >= top))
    assert np.all(got[t32 == 0] <= np.float32(2.0 ** -148))


@pytest.mark.exhaustive
def test_fast_erf_is_within_its_rows_ulps_on_every_float32_argument():
    """Every float32 x in [-4.5, 4.5] (beyond, |x| is clamped to 4, whose result is +-1:
    the sampled test above checks it): fast mode's erf is odd bit for bit, and within the
    ERF row's fast_ulps of libm's float64 erf (within a float64 ulp of the true value) in
    units of the correctly rounded float32's ulp, as above (about a minute)."""
    import math

    import numba

    ulps, each = OPS[Op.ERF].fast_ulps, _fast_form(Op.ERF)

    @numba.njit
    def worst(x, got):
        w = 0.0
        for i in range(x.shape[0]):
            t = math.erf(np.float64(x[i]))
            t32 = abs(np.float32(t))
            if t32 != 0:
                ulp = np.float64(np.nextafter(t32, np.float32(np.inf))) - np.float64(t32)
                w = max(w, abs(np.float64(got[i]) - t) / ulp)
        return w

    top, chunk, err, odd = int(np.float32(4.5).view(np.uint32)), 1 << 24, 0.0, True
    for s in range(0, top + 1, chunk):
        x = np.arange(s, min(s + chunk, top + 1), dtype=np.uint32).view(np.float32)
        got, neg = np.empty_like(x), np.empty_like(x)
        each(x, got)
        each(-x, neg)
        odd &= bool(np.array_equal(bits(neg), bits(got) ^ np.uint32(0x80000000)))
        err = max(err, worst(x, got))
    assert odd
    assert 0.5 < err <= ulps, err


def test_exp_keeps_a_nan_payload_and_sign(exp_to32):
    x = np.array([np.nan, -np.nan], dtype=np.float64)
    x.view(np.uint64)[0] |= np.uint64(12345)
    assert np.array_equal(bits(exp_to32(x)), bits(x))


N_EW = 64


@T.prim_func
def transcendentals(X: T.Tensor((N_EW,), "float32"), E32: T.Tensor((N_EW,), "float32"),
                    S32: T.Tensor((N_EW,), "float32"), P32: T.Tensor((N_EW,), "float32"),
                    H32: T.Tensor((N_EW,), "float32"), EB: T.Tensor((N_EW,), "bfloat16"),
                    E8: T.Tensor((N_EW,), "float8_e4m3fn"),
                    E64: T.Tensor((N_EW,), "float64"), F32: T.Tensor((N_EW,), "float32")):
    with T.Kernel(1) as _:
        for i in T.Parallel(N_EW):
            E32[i] = T.exp(X[i])
            S32[i] = T.sigmoid(X[i])
            P32[i] = T.exp2(X[i])
            H32[i] = T.tanh(X[i])
            EB[i] = T.exp(T.cast(X[i], "bfloat16"))
            E8[i] = T.exp(T.cast(X[i], "float8_e4m3fn") * T.cast(0.25, "float8_e4m3fn"))
            E64[i] = T.exp(T.cast(X[i], "float64"))
            F32[i] = T.erf(X[i])


def _outs():
    import ml_dtypes

    return {"E32": np.zeros(N_EW, np.float32), "S32": np.zeros(N_EW, np.float32),
            "P32": np.zeros(N_EW, np.float32), "H32": np.zeros(N_EW, np.float32),
            "EB": np.zeros(N_EW, ml_dtypes.bfloat16),
            "E8": np.zeros(N_EW, ml_dtypes.float8_e4m3fn), "E64": np.zeros(N_EW, np.float64),
            "F32": np.zeros(N_EW, np.float32)}


@pytest.mark.parametrize("tier", ["numba", "py"])
def test_exp_and_sigmoid_agree_with_the_interpreter(tier):
    src = tilepy.jit.source(transcendentals.func)
    assert "_exp_to32(" in src and "_exp2_to32(" in src and "_tanh_to32(" in src
    assert "_erf_to32(" in src
    assert "math.exp(" in src  # float64 results keep libm
    rng = np.random.default_rng(3)
    with np.errstate(over="ignore"):
        edges = EDGES.astype(np.float32)
    for trial in range(4):
        x = (rng.standard_normal(N_EW) * (4, 30, 60, 100)[trial]).astype(np.float32)
        x[: len(edges)] = edges if trial == 0 else x[: len(edges)]
        assert_agree(transcendentals.func, {"X": x, **_outs()}, {}, tier=tier,
                     ulp_for=("E64",))


# ------------------------------------------------------------------ max / min reductions

def _reducer(kind: str, dtype: str, n: int, clear: bool):
    @T.prim_func
    def reduce_rows(X: T.Tensor((4, n), dtype), Y: T.Tensor((4,), dtype)):
        with T.Kernel(1) as _:
            x = T.alloc_fragment((4, n), dtype)
            y = T.alloc_fragment((4,), dtype)
            T.copy(X[0, 0], x)
            T.copy(Y[0], y)
            if kind == "max":
                T.reduce_max(x, y, dim=1, clear=clear)
            else:
                T.reduce_min(x, y, dim=1, clear=clear)
            T.copy(y, Y[0])

    return reduce_rows


def _rows(rng, n: int, dtype) -> list[np.ndarray]:
    """4-row inputs: random; NaNs (payloads differ) early, late, in the tail; zeros of both
    signs as the extreme; all equal; infinities."""
    r = rng.standard_normal((4, n)).astype(dtype)
    nan = r.copy()
    nan[0, 1], nan[1, n - 1], nan[2, n // 2] = np.nan, -np.nan, np.nan
    nan.view(f"u{nan.itemsize}")[2, n // 2] |= 7
    zeros = np.where(rng.random((4, n)) < 0.5, -0.0, 0.0).astype(dtype)
    zeros[0] = 0.0
    zeros[1] = -0.0
    neg = -np.abs(r)
    neg[:, rng.integers(0, n, 4)] = -0.0  # -0 and +0 compete with negatives
    neg[0, 0] = 0.0
    if n > 9:  # the first zero sits in a later chain than a zero of the other sign
        neg[1, 3], neg[1, 8] = -0.0, 0.0
        neg[2, 2], neg[2, 9] = 0.0, -0.0
    same = np.full((4, n), 1.5, dtype)
    inf = r.copy()
    inf[0, :] = -np.inf
    inf[1, 3] = np.inf
    inf[2, :] = np.inf
    return [r, nan, zeros, neg, -neg, same, inf]


@pytest.mark.parametrize("kind,dtype", [
    ("max", "float32"), ("min", "float64"),
    pytest.param("min", "float32", marks=pytest.mark.exhaustive),
    pytest.param("max", "float64", marks=pytest.mark.exhaustive)])
def test_max_min_reductions_over_chains_keep_the_serial_fold(kind, dtype):
    rng = np.random.default_rng(11)
    npdt = np.dtype(dtype)
    for n, clear in ((37, True), (64, False), (5, True)):
        k = _reducer(kind, dtype, n, clear)
        assert "_extreme(x[" in tilepy.jit.source(k.func)
        for x in _rows(rng, n, npdt):
            for y0 in (np.zeros(4, npdt), np.array([np.nan, -0.0, 0.0, -np.inf], npdt)):
                assert_agree(k.func, {"X": x, "Y": y0.copy()}, {})
                assert_agree(k.func, {"X": x, "Y": y0.copy()}, {}, tier="py")
                a = {"X": x, "Y": y0.copy()}
                tilepy.jit.run(k.func, a, {})
                if not clear:  # the start value takes part: check one case by hand
                    fold = y0.copy()
                    for i in range(4):
                        for v in x[i]:
                            a_ = fold[i]
                            better = (a_ >= v or a_ != a_) if kind == "max" else \
                                (a_ <= v or a_ != a_)
                            fold[i] = a_ if better else v
                    nan = np.isnan(fold)
                    assert np.array_equal(np.isnan(a["Y"]), nan)
                    assert_same_bits(fold[~nan], a["Y"][~nan], f"{kind} fold")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_order_keys_sort_as_the_floats_do(dtype):
    """runtime._order_key (numba intrinsic and py form): integer order = float order, -0
    below +0, NaNs of either sign beyond +-inf; _key_float inverts it bit for bit."""
    import numba

    from tilepy.jit.runtime import _key_float, _order_key, numba_namespace

    ns = numba_namespace(())
    key_nb = numba.njit(lambda x: _order_key(x))
    back_nb = numba.njit(lambda k, like: _key_float(k, like))
    npdt = np.dtype(dtype)
    f = npdt.type
    rng = np.random.default_rng(2)
    tiny, big = np.finfo(npdt).smallest_subnormal, np.finfo(npdt).max
    finite = np.sort(np.concatenate([np.array([-big, -1.0, -tiny, tiny, 1.0, big], npdt),
                                     rng.standard_normal(50).astype(npdt) * 1e3]))
    neg, pos = finite[finite < 0], finite[finite > 0]
    vals = np.concatenate([np.array([-np.inf], npdt), neg, np.array([-0.0, 0.0], npdt), pos,
                           np.array([np.inf], npdt)])  # ascending, -0 before +0
    assert "_extreme" in ns
    for key in (key_nb, _order_key):
        keys = [int(key(f(v))) for v in vals]
        assert keys == sorted(keys) and len(set(keys)) == len(keys)  # -0 below +0
        for v, k in zip(vals, keys):
            for back in (back_nb, _key_float):
                got = back(np.array(k, f"i{npdt.itemsize}")[()], f(0))
                assert bits(np.array([got], npdt))[0] == bits(np.array([v], npdt))[0]
        nan_pos, nan_neg = np.array([np.nan, -np.nan], npdt)
        assert np.signbit(nan_neg) and not np.signbit(nan_pos)
        assert int(key(nan_pos)) > keys[-1] and int(key(nan_neg)) < keys[0]


# ------------------------------------------------------------------ hoisted loads

@T.prim_func
def scale_rows(X: T.Tensor((8, 32), "float32"), S: T.Tensor((8,), "float32"),
               Y: T.Tensor((8, 32), "float32")):
    with T.Kernel(1) as _:
        x = T.alloc_fragment((8, 32), "float32")
        s = T.alloc_fragment((8,), "float32")
        T.copy(X[0, 0], x)
        T.copy(S[0], s)
        for i, j in T.Parallel(8, 32):
            x[i, j] = x[i, j] / s[i]
        T.copy(x, Y[0, 0])


@T.prim_func
def running(X: T.Tensor((16,), "float32"), Y: T.Tensor((16,), "float32")):
    with T.Kernel(1) as _:
        acc = T.alloc_fragment((1,), "float32")
        alias = T.Tensor((1,), "float32", acc.data)
        T.clear(acc)
        for j in T.serial(16):
            alias[0] = acc[0] * 0.5 + X[j]  # acc is written through its re-view
            Y[j] = acc[0]


@T.prim_func
def guarded(X: T.Tensor((16,), "float32"), K: T.Tensor((1,), "int32"),
            Y: T.Tensor((16,), "float32")):
    with T.Kernel(1) as _:
        x = T.alloc_fragment((16,), "float32")
        T.copy(X[0], x)
        for j in T.Parallel(16):
            if K[0] < 16:
                Y[j] = x[K[0]] + x[j]  # x[K[0]] is read only when K[0] is in range
            else:
                Y[j] = x[j]


@pytest.mark.parametrize("tier", ["numba", "py"])
def test_a_load_the_loop_never_writes_is_read_once(tier):
    src = tilepy.jit.source(scale_rows.func)
    assert "read once" in src
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 32)).astype(np.float32)
    s = rng.standard_normal(8).astype(np.float32)
    s[0], s[1] = 0.0, -0.0
    assert_agree(scale_rows.func, {"X": x, "S": s, "Y": np.zeros_like(x)}, {}, tier=tier)


@pytest.mark.parametrize("tier", ["numba", "py"])
def test_loads_of_written_or_conditionally_read_buffers_stay_in_the_loop(tier):
    assert "read once" not in tilepy.jit.source(running.func)
    assert "read once" not in tilepy.jit.source(guarded.func)
    x = np.arange(1, 17, dtype=np.float32)
    a = {"X": x, "Y": np.zeros(16, np.float32)}
    tilepy.jit.run(running.func, a, {}, tier=tier)
    want, acc = np.zeros(16, np.float32), np.float32(0)
    for j in range(16):
        acc = np.float32(acc * np.float32(0.5) + x[j])
        want[j] = acc
    assert_same_bits(want, a["Y"], "running")
    for k in (3, 1000):
        assert_agree(guarded.func, {"X": x, "K": np.array([k], np.int32),
                                    "Y": np.zeros(16, np.float32)}, {}, tier=tier)


# ------------------------------------------------------------------ interleaved sums

def _summer(kind: str, rows: int, n: int, dim: int, clear: bool):
    shape = (rows, n) if dim == 1 else (n, rows)

    @T.prim_func
    def sum_rows(X: T.Tensor(shape, "float32"), Y: T.Tensor((rows,), "float32")):
        with T.Kernel(1) as _:
            x = T.alloc_fragment(shape, "float32")
            y = T.alloc_fragment((rows,), "float32")
            T.copy(X[0, 0], x)
            T.copy(Y[0], y)
            if kind == "sum":
                T.reduce_sum(x, y, dim=dim, clear=clear)
            else:
                T.reduce_abssum(x, y, dim=dim, clear=clear)
            T.copy(y, Y[0])

    return sum_rows


@pytest.mark.parametrize("kind", ["sum", pytest.param("abssum", marks=pytest.mark.exhaustive)])
def test_sums_into_a_few_outputs_run_as_independent_folds_in_order(kind):
    rng = np.random.default_rng(21)
    for rows, n, dim, clear in ((2, 33, 1, True), (5, 40, 0, False), (16, 9, 1, False),
                                (17, 8, 1, True)):
        k = _summer(kind, rows, n, dim, clear)
        assert ("independent folds" in tilepy.jit.source(k.func)) == (rows <= 16)
        shape = (rows, n) if dim == 1 else (n, rows)
        # magnitudes that make the sum depend on the order of its adds
        x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-4, 8, shape)).astype(np.float32)
        y0 = (rng.standard_normal(rows) * 1e6).astype(np.float32)
        a = {"X": x, "Y": y0.copy()}
        tilepy.jit.run(k.func, a, {})
        fold = np.zeros(rows, np.float32) if clear else y0.copy()
        for r in range(rows):
            for v in (x[r] if dim == 1 else x[:, r]):
                fold[r] = np.float32(fold[r] + (abs(v) if kind == "abssum" else v))
        assert_same_bits(fold, a["Y"], f"{kind} {rows}x{n} dim {dim}")
        assert_agree(k.func, {"X": x, "Y": y0.copy()}, {})


def test_slp_vectoriser_stays_on_for_register_blocks_and_off_for_folds_alone():
    """LLVM's SLP pass packs interleaved folds into gathers of one element per row (slower
    than scalar adds: docs/perf-log.md); the gemm's register blocks need it. No compile."""
    from tilepy.jit.diskcache import key
    from tilepy.jit.lower import lower
    from tilepy.kernels import gemm, softmax

    folds = lower(_summer("sum", 8, 64, 1, True).func)
    assert "independent folds" in folds.source and folds.slp is False
    assert lower(softmax(block_N=1024).func).slp is False
    assert lower(softmax(block_N=1024).func, fast=True).slp is True  # no folds in fast mode
    assert lower(gemm(64, 64, 32, "float32", "float32").func).slp is True
    # a cached module compiled one way is never loaded for the other
    assert key("src", tier="numba", fast=False, slp=False) != key("src", tier="numba",
                                                                  fast=False, slp=True)

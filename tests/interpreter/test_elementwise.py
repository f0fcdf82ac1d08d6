"""Element-wise kernels: Let/Store/Load vectorised over T.Parallel, edge guards, dtypes,
lane-varying if/else and while, block-varying serial loops."""

import functools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.interpreter import kernels as K
from tests.interpreter.oracle import np_dtype, random_values, same
from tilepy.interpreter import run

seeds = st.integers(0, 2**32 - 1)


@functools.lru_cache(maxsize=None)
def _affine(n, block, dtype, a, b):
    return K.affine(n, block, dtype, a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16",
                                   "float8_e4m3fn"])
@given(seed=seeds)
def test_affine_float_rounds_every_op(dtype, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 700))
    x = random_values(rng, n, dtype, specials=True)
    if dtype == "float8_e4m3fn":  # every code, overflow of x * 1.5 included
        x = rng.integers(0, 256, n).astype(np.uint8).view(ml_dtypes.float8_e4m3fn)
    y = np.zeros_like(x)
    run(_affine(n, 128, dtype, 1.5, -0.25).func, dict(X=x, Y=y), {})
    dt = np_dtype(dtype)
    expect = (x * dt.type(1.5)) + dt.type(-0.25)  # numpy / ml_dtypes: one rounding per op
    assert same(y, expect)


@pytest.mark.parametrize("dtype", ["int32", "int8"])
@given(seed=seeds)
def test_affine_int_wraps(dtype, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 700))
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, n, endpoint=True).astype(dtype)
    y = np.zeros_like(x)
    run(_affine(n, 64, dtype, 3, 1).func, dict(X=x, Y=y), {})
    with np.errstate(over="ignore"):
        expect = (x * np.array(3, dtype) + np.array(1, dtype)).astype(dtype)
    assert np.array_equal(y, expect)


def _collatz_steps(v: int) -> int:
    s = 0
    while v != 1:
        v = v // 2 if v % 2 == 0 else 3 * v + 1
        s += 1
    return s


@given(seed=seeds)
def test_while_with_lane_varying_condition(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(1, 300, 75).astype(np.int32)
    steps = np.full(75, -1, np.int32)
    run(_collatz().func, dict(X=x, Steps=steps), {})
    assert steps.tolist() == [_collatz_steps(int(v)) for v in x]


@functools.lru_cache(maxsize=None)
def _collatz():
    return K.collatz(75, 32)  # the last block is partial: guarded loads must not fault


@given(seed=seeds)
def test_serial_loop_with_block_varying_trip_count(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(13).astype(np.float32)
    y = np.zeros_like(x)
    run(_prefix().func, dict(X=x, Y=y), {})
    acc, expect = np.float32(0), []
    for v in x:
        acc = np.float32(acc + v)
        expect.append(acc)
    assert same(y, np.array(expect, np.float32))


@functools.lru_cache(maxsize=None)
def _prefix():
    return K.prefix_of_blocks(13)


@given(seed=seeds)
def test_nested_lane_and_block_branches(seed):
    rng = np.random.default_rng(seed)
    x = random_values(rng, 200, "float32", specials=True)
    y = np.full_like(x, 7.0)
    run(_branches().func, dict(X=x, Y=y), {})
    block_even = (np.arange(200) // 32) % 2 == 0
    with np.errstate(invalid="ignore"):
        expect = np.where(x > 0, np.sqrt(x.astype(np.float64)).astype(np.float32),
                          np.where(block_even, -x, x * np.float32(2)))
    assert same(y, expect)


@functools.lru_cache(maxsize=None)
def _branches():
    return K.branches(200, 32)


@given(seed=seeds)
def test_two_d_parallel_softmax_with_transposed_store(seed):
    rng = np.random.default_rng(seed)
    m, n = 21, 16
    x = (rng.standard_normal((m, n)) * 4).astype(np.float32)
    y = np.zeros((n, m), np.float32)
    run(_p2d().func, dict(X=x, Y=y), {})
    mx = x.max(axis=1, keepdims=True)
    e = np.exp((x - mx).astype(np.float64)).astype(np.float32)
    s = np.zeros((m, 1), np.float32)
    for j in range(n):  # sequential, as the contract orders reductions
        s = s + e[:, j:j + 1]
    assert same(y, (e / s).T)


@functools.lru_cache(maxsize=None)
def _p2d():
    return K.parallel_2d(21, 16, 8, "float32")


@given(seed=seeds)
def test_tiles_out_of_memory_order(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(7 * 16).astype(np.float32)
    y = np.zeros_like(x)
    run(_reverse().func, dict(X=x, Y=y), {})
    expect = (x + np.float32(1)).reshape(7, 16)[::-1].reshape(-1)
    assert same(y, expect)


@functools.lru_cache(maxsize=None)
def _reverse():
    return K.reverse_tiles(7, 16)


@given(seed=seeds)
def test_unrolled_horner_rounds_mul_and_add_separately(seed):
    rng = np.random.default_rng(seed)
    x = random_values(rng, 90, "float32")
    c = random_values(rng, 5, "float32")
    y = np.zeros_like(x)
    run(_horner().func, dict(X=x, C=c, Y=y), {})
    acc = np.zeros_like(x)
    for d in range(5):
        acc = acc * x + c[d]  # numpy float32: two roundings
    assert same(y, acc)


@functools.lru_cache(maxsize=None)
def _horner():
    return K.horner(90, 32, 5)

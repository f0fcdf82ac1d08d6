"""Pooling with padding (interpreter): values against a numpy loop implementing
PyTorch's rules (padded positions never win a max; an average divides by kernel^2 with
count_include_pad, else by the positions inside the input), gradients against float64
central differences, and the padding limit."""

import numpy as np
import pytest

import tilepy
from tests.models.gradcheck import check
from tilepy.models import Tensor, nn
from tilepy.models.errors import ModelError

F = nn.functional


@pytest.fixture(autouse=True)
def interp():
    with tilepy.backend("interp"):
        yield


def _numpy_pool(x, kind, k, s, p, include=True):
    n, c, h, w = x.shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * s - p, j * s - p
            win = x[:, :, max(r0, 0):r0 + k, max(c0, 0):c0 + k]
            if kind == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                out[:, :, i, j] = win.sum(axis=(2, 3)) / (k * k if include else win[0, 0].size)
    return out


@pytest.mark.parametrize("k, s, p", [(3, 2, 1), (2, 1, 1)])
def test_padded_pooling_values_and_gradients(k, s, p):
    x = np.random.default_rng(k + s).standard_normal((1, 1, 5, 4)) - 2.0  # max < 0 = pad
    for kind, include in (("max", True), ("avg", True), ("avg", False)):
        fn = (lambda t: F.max_pool2d(t, k, s, p)) if kind == "max" else \
            (lambda t, inc=include: F.avg_pool2d(t, k, s, p, count_include_pad=inc))
        np.testing.assert_allclose(fn(Tensor(x)).data, _numpy_pool(x, kind, k, s, p, include),
                                   rtol=1e-12)
        check(fn, x)


def test_pool_modules_and_padding_limit():
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    got = nn.AvgPool2d(3, 2, 1, count_include_pad=False)(Tensor(x)).data[0, 0]
    np.testing.assert_array_equal(got, [[2.5, 4], [8.5, 10]])  # 0,1,4,5 / 4; 1,2,3,5,6,7 / 6
    got = nn.MaxPool2d(2, 2, 1)(Tensor(x)).data[0, 0]
    np.testing.assert_array_equal(got, [[0, 2, 3], [8, 10, 11], [12, 14, 15]])
    with pytest.raises(ModelError, match=r"padding must lie in \[0, kernel_size // 2 = 1\]; "
                                         r"got padding=2"):
        F.max_pool2d(Tensor(x), 3, 1, 2)


@pytest.mark.exhaustive  # compiles both pooling kernels for each kind
def test_padded_pooling_same_bits_on_jit_and_interpreter():
    rng = np.random.default_rng(5)
    x0 = rng.standard_normal((2, 3, 9, 7)).astype(np.float32)
    g = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    runs = {}
    for backend in ("interp", "jit"):
        with tilepy.backend(backend):
            for kind, include in (("max", True), ("avg", True), ("avg", False)):
                x = Tensor(x0, requires_grad=True)
                y = F.max_pool2d(x, 3, 2, 1) if kind == "max" else \
                    F.avg_pool2d(x, 3, 2, 1, count_include_pad=include)
                (y * Tensor(g)).sum().backward()
                runs[backend, kind, include] = (y.data.tobytes(), x.grad.tobytes())
    for (_, kind, include), bits in runs.items():
        assert bits == runs["interp", kind, include]


def test_the_pool_kernels_division_is_exact_at_and_next_to_multiples():
    # _div (models/kernels/pool.py): e // d through a float64 reciprocal and one correction
    import tilepy.language as T
    from tilepy.models.kernels.pool import _div, _inverse

    n = T.symbolic("n")

    @T.prim_func
    def divide(E: T.Tensor((n,), "int32"), D: T.Tensor((n,), "int32"),
               Q: T.Tensor((n,), "int32")):
        with T.Kernel(1) as _:
            for i in T.Parallel(n):
                Q[i] = _div(E[i], D[i], _inverse(D[i]))

    rng = np.random.default_rng(0)
    d = np.concatenate([np.arange(1, 200), [3, 7, 49, 1 << 15, 3 ** 18, (1 << 30) - 1],
                        rng.integers(1, 1 << 15, 300)]).astype(np.int64)
    k = (((1 << 30) - 1) // d * rng.random(d.size)).astype(np.int64)
    e = np.concatenate([k * d, np.maximum(k * d - 1, 0), k * d + d - 1, k * d + 1])
    e, d = np.minimum(e, (1 << 30) - 1).astype(np.int32), np.tile(d, 4).astype(np.int32)
    q = np.empty_like(e)
    divide(e, d, q)
    np.testing.assert_array_equal(q, e // d)

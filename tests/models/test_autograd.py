"""Every op's backward against float64 central differences of its own forward, in the
interpreter (no compile: sizes vary freely, hypothesis draws them)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilepy
from tests.models.gradcheck import check
from tests.strategies import conv_cases, shapes
from tilepy.models import Tensor, cat, nn
from tilepy.models.errors import ModelError

F = nn.functional


@pytest.fixture(autouse=True)
def interp():
    with tilepy.backend("interp"):
        yield


def rand(rng, *shape):
    return rng.standard_normal(shape)


@settings(max_examples=10)  # finite differences: many kernel calls each
@given(shapes(max_dims=3, max_side=4), st.integers(0, 2**31))
def test_elementwise_with_broadcasting(shape, seed):
    rng = np.random.default_rng(seed)
    a = rand(rng, *shape)
    b = rand(rng, *shape[1:]) if len(shape) > 1 else rand(rng, 1)
    check(lambda x, y: x + y, a, b)
    check(lambda x, y: x - y, a, b)
    check(lambda x, y: x * y, a, b)
    check(lambda x, y: x / y, a, np.abs(b) + 0.5)
    check(lambda x: 3.0 - 2.0 * x / 4.0 + 1, a)


def test_rsqrt_and_affine_kernels():
    from tilepy.models.ops import activation, affine

    x = np.abs(rand(np.random.default_rng(4), 3, 4)) + 0.2
    check(lambda t: activation(t, "rsqrt"), x)
    check(lambda t: affine(t, -1.5, 0.25), x)


@pytest.mark.parametrize("name", ["relu", "gelu", "silu", "tanh", "sigmoid", "exp", "log"])
def test_activations(name):
    rng = np.random.default_rng(1)
    x = rand(rng, 3, 5)
    if name == "log":
        x = np.abs(x) + 0.1
    check(lambda t: getattr(F, name)(t) if hasattr(F, name) else getattr(t, name)(), x)


@settings(max_examples=10)  # finite differences: many kernel calls each
@given(st.integers(1, 5), st.integers(1, 6), st.integers(1, 5), st.integers(0, 2**31))
def test_matmul_and_linear(m, k, n, seed):
    rng = np.random.default_rng(seed)
    check(lambda a, b: a @ b, rand(rng, m, k), rand(rng, k, n))
    check(lambda x, w, b: F.linear(x, w, b), rand(rng, 2, m, k), rand(rng, n, k), rand(rng, n))


@settings(max_examples=15)  # finite differences: many kernel calls each
@given(shapes(max_dims=3, max_side=4), st.integers(0, 2**31), st.data())
def test_reductions(shape, seed, data):
    x = rand(np.random.default_rng(seed), *shape)
    dim = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    keep = data.draw(st.booleans())
    check(lambda t: t.sum(dim, keep), x)
    check(lambda t: t.mean(dim, keep), x)
    check(lambda t: t.max(dim, keep), x)


def test_max_shares_the_gradient_among_ties():
    x = Tensor(np.array([[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]]), requires_grad=True)
    x.max(dim=1).sum().backward()
    np.testing.assert_array_equal(x.grad, [[0, 0.5, 0.5], [1, 0, 0]])


def test_shape_ops():
    rng = np.random.default_rng(2)
    check(lambda t: t.reshape(3, 4).T[1:3, ::2], rand(rng, 2, 6))
    check(lambda t: t.permute(2, 0, 1)[0], rand(rng, 2, 3, 4))
    check(lambda a, b: cat([a, b * 2.0], dim=1), rand(rng, 2, 3), rand(rng, 2, 1))


@settings(max_examples=10)  # finite differences: many kernel calls each
@given(st.integers(1, 6), st.integers(2, 12), st.integers(0, 2**31))
def test_cross_entropy(m, c, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, c, m)
    check(lambda x: F.cross_entropy(x, labels) * 3.0, rand(rng, m, c))


def test_cross_entropy_value_matches_log_softmax():
    rng = np.random.default_rng(3)
    x, labels = rand(rng, 7, 20) * 5, rng.integers(0, 20, 7)
    lse = np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1)
    want = np.mean(lse - x[np.arange(7), labels])
    np.testing.assert_allclose(F.cross_entropy(Tensor(x), labels).item(), want, rtol=1e-13)


@settings(max_examples=10)  # finite differences: many kernel calls each
@given(conv_cases(), st.integers(0, 2**31))
def test_conv2d(case, seed):
    n, c, h, w, f, k, stride, pad, groups = case
    rng = np.random.default_rng(seed)
    x, wt, b = rand(rng, n, c, h, w), rand(rng, f, c // groups, k, k), rand(rng, f)
    check(lambda x, wt, b: F.conv2d(x, wt, b, stride, pad, groups), x, wt, b)


def test_conv2d_forward_matches_a_direct_sum():
    rng = np.random.default_rng(4)
    x, wt, b = rand(rng, 2, 4, 6, 5), rand(rng, 6, 2, 3, 3), rand(rng, 6)
    y = F.conv2d(Tensor(x), Tensor(wt), Tensor(b), stride=2, padding=1, groups=2).data
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros_like(y)
    for f in range(6):
        g = f // 3
        for oh in range(y.shape[2]):
            for ow in range(y.shape[3]):
                win = xp[:, 2 * g:2 * g + 2, 2 * oh:2 * oh + 3, 2 * ow:2 * ow + 3]
                want[:, f, oh, ow] = (win * wt[f]).sum(axis=(1, 2, 3)) + b[f]
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)


@settings(max_examples=5)  # finite differences: many kernel calls each
@given(st.integers(1, 3), st.integers(1, 3), st.integers(0, 2), st.integers(0, 2**31))
def test_pooling(size, stride, extra, seed):
    rng = np.random.default_rng(seed)
    x = rand(rng, 1, 2, size + extra + 1, size + extra)
    check(lambda t: F.max_pool2d(t, size, stride), x)
    check(lambda t: F.avg_pool2d(t, size, stride), x)


def test_pool_forward_values():
    x = np.arange(32.0).reshape(1, 2, 4, 4)
    np.testing.assert_array_equal(F.max_pool2d(Tensor(x), 2).data[0, 1],
                                  [[21, 23], [29, 31]])
    np.testing.assert_array_equal(F.avg_pool2d(Tensor(x), 2).data[0, 0],
                                  [[2.5, 4.5], [10.5, 12.5]])


def test_gradients_accumulate_and_no_grad_records_nothing():
    w = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    (w * 3.0).sum().backward()
    (w * w).sum().backward()
    np.testing.assert_array_equal(w.grad, [5.0, 7.0])
    from tilepy.models import no_grad
    with no_grad():
        y = w * 2.0
    assert not y.requires_grad and y.is_leaf


def test_a_tensor_used_twice_gets_both_gradients():
    a = Tensor(np.array([2.0, -1.0]), requires_grad=True)
    b = Tensor(np.array([0.5, 4.0]), requires_grad=True)
    z = a + b  # one gradient array flows to both: each leaf must own its copy
    (z * a).sum().backward()
    np.testing.assert_array_equal(a.grad, 2 * a.data + b.data)
    np.testing.assert_array_equal(b.grad, a.data)


def test_a_residual_input_gets_the_gradient_of_both_paths():
    """x + f(x), x first: x must wait for f's subtree (a depth-first order that marked
    tensors when pushed ran x first and dropped f's share)."""
    rng = np.random.default_rng(9)
    check(lambda x: x + x.sigmoid(), rand(rng, 3))
    check(lambda x: (lambda h: h + (h * h).tanh())(x * 2.0), rand(rng, 2, 2))
    check(lambda x, w: (lambda h: h + F.linear(h, w))(x.tanh()), rand(rng, 2, 3),
          rand(rng, 3, 3))


def test_errors_name_the_op_and_shapes():
    a, b = Tensor(np.ones((2, 3))), Tensor(np.ones((4, 3)))
    with pytest.raises(ModelError, match=r"add: shapes \(2, 3\) and \(4, 3\) do not broadcast"):
        a + b
    with pytest.raises(ModelError, match=r"matmul: shapes \(2, 3\) and \(4, 3\)"):
        a @ b
    with pytest.raises(ModelError, match="matmul: operands have dtypes float32 and float64"):
        Tensor(np.ones((2, 3), np.float32)) @ Tensor(np.ones((3, 2)))
    with pytest.raises(ModelError, match=r"labels must lie in \[0, 3\); got values from 0 to 5"):
        F.cross_entropy(Tensor(np.ones((2, 3))), np.array([0, 5]))
    with pytest.raises(ModelError, match="non-scalar"):
        (Tensor(np.ones(2), requires_grad=True) * 2.0).backward()

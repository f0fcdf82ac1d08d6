"""A training step in the JIT's fast mode (through the autograd's direct launch path)
against exact mode: same loss and gradients within float32 rounding, not bitwise
(exhaustive: compiling the fast kernels takes a minute or more here)."""

import numpy as np
import pytest

import tilepy
from tilepy.models import nn, zoo

F = nn.functional


def _grads(**backend):
    nn.manual_seed(0)
    model = zoo.mlp(hidden=(32, 32))
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 64)).astype(np.float32), rng.integers(0, 10, 16)
    with tilepy.backend("jit", **backend):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
    return [loss.item()] + [p.grad for p in model.parameters()]


@pytest.mark.exhaustive
def test_fast_mode_step_matches_exact_mode_within_rounding():
    exact, fast = _grads(), _grads(fast=True)
    assert abs(exact[0] - fast[0]) < 1e-5 * abs(exact[0])
    for a, b in zip(exact[1:], fast[1:]):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


def _lenet_grads(**backend):
    nn.manual_seed(0)
    model = zoo.lenet5()
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((8, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 8)
    with tilepy.backend("jit", **backend):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
    return [loss.item()] + [p.grad for p in model.parameters()]


@pytest.mark.exhaustive
def test_fast_mode_lenet_step_matches_exact_mode_within_rounding():
    exact, fast = _lenet_grads(), _lenet_grads(fast=True)
    assert abs(exact[0] - fast[0]) < 1e-5 * abs(exact[0])
    for a, b in zip(exact[1:], fast[1:]):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


@pytest.mark.exhaustive
def test_fast_gelu_forward_and_backward_stay_within_float32_rounding_of_exact_mode():
    """Fast mode's GELU (erf within 1 ulp, jit/mathlib.py; exp within 2) against exact
    mode's, per element. Forward y = 0.5 x (1 + erf(x / sqrt 2)): the two erfs differ by at
    most 1.5 ulp <= 3 U (U = 2**-24, |erf| <= 1), 1 + erf and the product add 2 roundings
    each side: |dy| <= U (0.5 |x| (3 + 4 * 2) + 4 |y|). Backward g (cdf + x pdf): cdf as
    above, pdf's exp 2.5 ulp apart, 3 roundings each side: |dg| <= U |g| (6 + 8 |x| pdf + 6)."""
    from tilepy.models import kops

    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(-6, 6, 20000), rng.standard_normal(20000) * 1e-3,
                        [0.0, -0.0, 1.0, -1.0, 1.4142135, -1.4142135, 5.7, -5.7, 30.0]])
    x = x.astype(np.float32)
    g = rng.standard_normal(x.size).astype(np.float32)
    out = {}
    for fast in (False, True):
        with tilepy.backend("jit", fast=fast):
            y = kops.unary(x, "gelu")
            out[fast] = y, kops.unary_bwd(x, y, g, "gelu")
    u, x64 = 2.0 ** -24, x.astype(np.float64)
    (y0, d0), (y1, d1) = out[False], out[True]
    assert np.all(np.abs(y1 - y0.astype(np.float64)) <= u * (5.5 * np.abs(x64) + 4 * np.abs(y0)))
    pdf = np.exp(-0.5 * x64 * x64) / np.sqrt(2 * np.pi)
    assert np.all(np.abs(d1 - d0.astype(np.float64))
                  <= u * np.abs(g) * (12 + 8 * np.abs(x64) * pdf))
    assert not np.array_equal(y1, y0)  # the fast form ran (not libm's bits)


@pytest.mark.exhaustive
def test_fast_matmul_reads_transposes_in_place_and_sums_leading_axes_by_gemm():
    """Fast mode: x.T and w.T go to the gemm with its transpose flags (no copy), and a sum
    over leading axes is ones @ x; each within the gemm bound 2 gamma_{K+1} sum |a||b|."""
    from tilepy.kernels.gemm import gemm
    from tilepy.models import kops

    rng = np.random.default_rng(6)
    x = rng.standard_normal((70, 33)).astype(np.float32)
    w = rng.standard_normal((45, 33)).astype(np.float32)
    g = rng.standard_normal((70, 45)).astype(np.float32)
    u = 2.0 ** -24

    def within(got, a, b):
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        k = a.shape[1]
        bound = 2 * (k + 1) * u / (1 - (k + 1) * u) * (np.abs(a64) @ np.abs(b64))
        assert got.shape == bound.shape and np.all(np.abs(got - a64 @ b64) <= bound)

    kops._KERNELS.clear()
    with tilepy.backend("jit", fast=True):
        within(kops.matmul(x, w.T), x, w.T)  # a linear layer's forward
        within(kops.matmul(g.T, x), g.T, x)  # its weight gradient
        s = kops.reduce(g.reshape(7, 10, 45), (0, 1), "sum", False)
    within(s[None], np.ones((1, 70), np.float32), g)
    flags = {(dict(key[1:]).get("trans_A"), dict(key[1:]).get("trans_B"))
             for key in kops._KERNELS if key[0] is gemm}
    assert flags == {(None, True), (True, None), (None, None)}


@pytest.mark.exhaustive
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "relu_mask"])
def test_fast_row_broadcast_binary_matches_the_materialised_broadcast(op):
    """Fast mode's x op bias ((..., N) with (N,)) reads the bias per tile instead of
    materialising it: the same formula per element as binary on the
    broadcast copy (one rounding; fast-math's reciprocal may move a quotient by 1 ulp).
    Shapes cut tiles at both edges; out=x (in-place accumulation) too."""
    from tilepy.models import kops

    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 37, 70)).astype(np.float32)
    y = rng.standard_normal(70).astype(np.float32)
    with tilepy.backend("jit"):  # binary on the broadcast copy
        want = kops.binary(x, np.ascontiguousarray(np.broadcast_to(y, x.shape)), op)
    with tilepy.backend("jit", fast=True):
        got = kops.binary(x, y, op)
        inplace = x.copy()
        kops.binary(inplace, y, op, out=inplace)
    assert ("binary_rows", (("dtype", np.dtype(np.float32)),)) in {
        (k[0].__name__, k[1:]) for k in kops._KERNELS}
    for g in (got, inplace):
        if op == "div":
            np.testing.assert_allclose(g, want, rtol=2.0 ** -23, atol=0)
        else:
            assert np.array_equal(g.view(np.uint32), want.view(np.uint32))


def test_exact_row_broadcast_binary_gives_the_broadcast_copys_bits():
    """Exact mode's x op bias reads the bias per tile too (binary_rows), with the bits of
    binary on the materialised broadcast (signed zeros, infinities, NaN included; on the
    interpreter: the JIT's exact kernels give the interpreter's bits)."""
    from tilepy.models import kops

    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 19, 70)).astype(np.float32)
    x[0, :3, :4] = [[0.0, -0.0, np.inf, np.nan]] * 3
    y = rng.standard_normal(70).astype(np.float32)
    y[:4] = [-0.0, 0.0, -np.inf, 1.0]
    with tilepy.backend("interp"):
        for op in ("add", "mul", "relu_mask"):
            want = kops.binary(x, np.ascontiguousarray(np.broadcast_to(y, x.shape)), op)
            got = kops.binary(x, y, op)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), op
    assert ("binary_rows", (("dtype", np.dtype(np.float32)),)) in {
        (k[0].__name__, k[1:]) for k in kops._KERNELS}


@pytest.mark.exhaustive
def test_jit_gelu_keeping_its_cdf_gives_unarys_bits():
    """On the JIT (exact), gelu_fwd / gelu_bwd give unary's and unary_bwd's GELU bits."""
    from tilepy.models import kops

    rng = np.random.default_rng(6)
    x = np.concatenate([rng.uniform(-7, 7, 5000), [0.0, -0.0, np.inf, -np.inf, np.nan,
                                                   1e-30, -40.0]]).astype(np.float32)
    g = rng.standard_normal(x.size).astype(np.float32)
    with tilepy.backend("jit"):
        y, cdf = kops.gelu(x)
        want = kops.unary(x, "gelu")
        got, ref = kops.gelu_bwd(x, cdf, g), kops.unary_bwd(x, want, g, "gelu")
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))

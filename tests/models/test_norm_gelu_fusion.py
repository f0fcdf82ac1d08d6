"""LayerNorm's / RMSNorm's affine map in the normalising launch and Linear's bias + GELU in
one launch: the values and gradients of the separate ops they replace, bit for bit, on
the interpreter (the ground truth) and the JIT's exact mode; the launches they save;
fast mode within derived bounds of exact mode; gradients against finite differences."""

import contextlib

import ml_dtypes
import numpy as np
import pytest

import tilepy
from tests.models.gradcheck import check
from tilepy.models import Tensor, kops, nn
from tilepy.models.kernels import launch as L
from tilepy.models.nn import layers, norm

F = nn.functional
U = 2.0 ** -24  # float32's unit roundoff


@contextlib.contextmanager
def unfused():
    """The separate ops: the norm then elementwise * weight + bias; Linear then GELU."""
    fusable, fused = norm._fusable, layers.Linear.fused_forward
    norm._fusable, layers.Linear.fused_forward = (lambda *a: False), None
    try:
        yield
    finally:
        norm._fusable, layers.Linear.fused_forward = fusable, fused


def _rows(rng, shape, dtype=np.float32):
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1, shape[-1])
    flat[1] = 0.0  # a constant row: xhat 0
    flat[2, : shape[-1] // 2] = -0.0
    flat[3] = 1e30  # huge equal values: variance 0
    return x


def _run(op, arrays, g, backend="interp", **mode):
    """(output, gradients of every input) of op(*tensors) with output gradient g."""
    ts = [Tensor(a.copy(), requires_grad=True) for a in arrays]
    with tilepy.backend(backend, **mode):
        out = op(*ts)
        out.backward(g)
    return [out.data] + [t.grad for t in ts]


def _bits(a):
    return np.atleast_1d(a).view(np.uint8)


def _assert_same(want, got):
    for a, b in zip(want, got):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(_bits(a), _bits(b))


NORMS = {  # name -> (op, shapes of its inputs)
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (40,), w, b), [(3, 7, 40), (40,), (40,)]),
    "layer_norm_2d": (lambda x, w, b: F.layer_norm(x, (2, 20), w, b),
                      [(9, 2, 20), (2, 20), (2, 20)]),
    "rms_norm": (lambda x, w: F.rms_norm(x, (40,), w), [(21, 40), (40,)]),
    "layer_norm_wide": (lambda x, w, b: F.layer_norm(x, (300,), w, b),
                        [(5, 300), (300,), (300,)]),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(NORMS))
def test_fused_norms_give_the_separate_ops_bits_on_the_interpreter(name, dtype):
    op, shapes = NORMS[name]
    rng = np.random.default_rng(len(name))
    arrays = [_rows(rng, shapes[0], dtype)] + [rng.standard_normal(s).astype(dtype)
                                               for s in shapes[1:]]
    arrays[1].reshape(-1)[:2] = [-0.0, 0.0]
    g = rng.standard_normal(shapes[0]).astype(dtype)
    with unfused():
        want = _run(op, arrays, g)
    kops._KERNELS.clear()
    got = _run(op, arrays, g)
    _assert_same(want, got)
    built = {k[0].__name__ for k in kops._KERNELS}
    assert {"norm_affine_fwd", "norm_affine_bwd", "col_sums"} <= built
    assert not built & {"row_norm_fwd", "binary_rows", "binary"}


def test_norm_without_an_input_gradient_launches_only_the_column_sums():
    """The first norm of a block reads the data: no dx launch, as no grad is needed."""
    rng = np.random.default_rng(3)
    ln = nn.LayerNorm(16)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    with tilepy.backend("interp"), L.profile() as prof:
        ln(x).backward(np.ones((4, 16), np.float32))
    assert set(prof) == {"norm_affine_fwd", "col_sums"}
    np.testing.assert_array_equal(ln.bias.grad, np.full(16, 4.0, np.float32))


def test_norms_off_the_fused_path_keep_the_elementwise_ops():
    """Narrow input, a weight of another dtype and no weight stay on the separate ops."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    w64 = Tensor(np.ones(8), requires_grad=True)
    cases = [(Tensor(x.astype(ml_dtypes.bfloat16)), Tensor(np.ones(8, ml_dtypes.bfloat16))),
             (Tensor(x), w64), (Tensor(x), None)]
    for xt, w in cases:
        kops._KERNELS.clear()
        with tilepy.backend("interp"):
            F.layer_norm(xt, (8,), w, None)
        assert "norm_affine_fwd" not in {k[0].__name__ for k in kops._KERNELS}


def _mlp(dtype, act="gelu", bias=True):
    nn.manual_seed(5)
    return nn.Sequential(nn.Linear(12, 70, bias=bias, dtype=dtype),
                         nn.GELU() if act == "gelu" else nn.ReLU(),
                         nn.Linear(70, 3, dtype=dtype))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_linear_then_gelu_in_a_sequential_is_one_op_with_the_separate_ops_bits(dtype):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 9, 12)).astype(dtype)
    x.reshape(-1)[:3] = [0.0, -0.0, 40.0]
    g = rng.standard_normal((2, 9, 3)).astype(dtype)
    out = {}
    for fused in (False, True):
        model = _mlp(dtype)
        xt = Tensor(x.copy(), requires_grad=True)
        kops._KERNELS.clear()
        with contextlib.nullcontext() if fused else unfused(), tilepy.backend("interp"):
            y = model(xt)
            y.backward(g)
        names = {k[0].__name__ for k in kops._KERNELS}
        assert ("gelu_bias_fwd" in names) == fused and ("gelu_fwd" in names) != fused
        out[fused] = [y.data, xt.grad] + [p.grad for p in model.parameters()]
    _assert_same(out[False], out[True])


def test_linear_gelu_fuses_only_a_biased_linear_then_gelu():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 12)).astype(np.float32)
    for act, bias in (("relu", True), ("gelu", False)):
        kops._KERNELS.clear()
        with tilepy.backend("interp"):
            _mlp(np.float32, act, bias)(x)
        assert "gelu_bias_fwd" not in {k[0].__name__ for k in kops._KERNELS}


def test_fused_ops_gradients_against_finite_differences():
    rng = np.random.default_rng(8)
    with tilepy.backend("interp"):
        check(lambda x, w, b: F.linear_gelu(x, w, b), rng.standard_normal((2, 3, 4)),
              rng.standard_normal((5, 4)), rng.standard_normal(5))
        check(lambda x, w: F.rms_norm(x, (3, 2), w), rng.standard_normal((4, 3, 2)),
              rng.standard_normal((3, 2)))


def _block_step(backend, **mode):
    nn.manual_seed(9)
    block, head = nn.TransformerBlock(16, 2, 32), nn.Linear(16, 5)
    rng = np.random.default_rng(9)
    x = Tensor(rng.standard_normal((2, 12, 16)).astype(np.float32), requires_grad=True)
    with tilepy.backend(backend, **mode):
        loss = F.cross_entropy(head(block(x)).mean(1), np.array([1, 4]))
        loss.backward()
    return [loss.data, x.grad] + [p.grad for p in block.parameters()]


def _fused_kernels(backend):
    rng = np.random.default_rng(11)
    x, g = _rows(rng, (70, 24)), rng.standard_normal((70, 24)).astype(np.float32)
    w, b = rng.standard_normal(24).astype(np.float32), rng.standard_normal(24).astype(np.float32)
    out = _run(lambda x, w, b: F.layer_norm(x, (24,), w, b), [x, w, b], g, backend)
    h = x * 3
    with tilepy.backend(backend):
        out += list(kops.gelu_bias(h, b)) + [h]
    return out


def test_the_fused_kernels_give_the_interpreters_bits_on_the_jit():
    """The JIT's exact norm_affine_fwd, norm_affine_bwd, col_sums and gelu_bias_fwd (one
    compile each; signed zeros, huge and constant rows) against the interpreter."""
    _assert_same(_fused_kernels("interp"), _fused_kernels("jit"))


@pytest.mark.exhaustive  # compiles a transformer block's kernels
def test_a_transformer_blocks_fused_kernels_give_the_interpreters_bits_on_the_jit():
    """The JIT's exact kernels against the interpreter, through a TransformerBlock's
    step (its norms and feed-forward take the fused ops)."""
    want = _block_step("interp")
    kops._KERNELS.clear()
    got = _block_step("jit")
    assert {"norm_affine_fwd", "norm_affine_bwd", "col_sums", "gelu_bias_fwd"} <= {
        k[0].__name__ for k in kops._KERNELS}
    _assert_same(want, got)


@pytest.mark.exhaustive  # compiles the fast kernels
def test_fast_fused_norm_is_within_the_derived_bound_of_exact_mode():
    """Fast mode sums a row's statistics and the column sums in other orders (and may
    contract x * w + b). Per mode, with float32's U, N features and M rows: the mean is
    off by at most (N + 1) U mean|x|; the variance by (N + 3) U relatively (it is
    stationary in the mean: the mean's error enters at second order), so rstd by
    (N + 6) U / 2 with its roundings; hence |d xhat| <= D = (N + 6) U (|xhat| + mean|x|
    rstd). y adds 2 U (|xhat w| + |b|); dx = rstd (gw - mean(gw) - xhat mean(gw xhat))
    adds (N + 8) U of its terms' absolute values and the xhat and rstd errors; the column
    sums (M + 2) U of their absolute sums plus sum |g| D. Two modes: twice each; the
    test asserts twice that again."""
    m, n = 300, 64
    rng = np.random.default_rng(10)
    x, g = rng.standard_normal((m, n)).astype(np.float32), rng.standard_normal((m, n))
    w, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    g = g.astype(np.float32)
    ln = (lambda x, w, b: F.layer_norm(x, (n,), w, b))
    exact = _run(ln, [x, w, b], g)
    fast = _run(ln, [x, w, b], g, "jit", fast=True)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    rstd = 1 / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    xhat = (x64 - x64.mean(1, keepdims=True)) * rstd
    d = (n + 6) * U * (np.abs(xhat) + np.abs(x64).mean(1, keepdims=True) * rstd)
    gw = np.abs(g64 * w)
    mgw, mgwx = gw.mean(1, keepdims=True), (gw * np.abs(xhat)).mean(1, keepdims=True)
    dx = rstd * (g64 * w - (g64 * w).mean(1, keepdims=True)
                 - xhat * (g64 * w * xhat).mean(1, keepdims=True))
    bounds = (
        np.abs(w) * d + 2 * U * (np.abs(xhat * w) + np.abs(b)),
        rstd * ((n + 8) * U * (gw + mgw + np.abs(xhat) * mgwx) + d * mgwx
                + np.abs(xhat) * (gw * d).mean(1, keepdims=True))
        + np.abs(dx) * (n + 6) * U,
        (m + 2) * U * np.abs(g64 * xhat).sum(0) + (np.abs(g64) * d).sum(0),
        (m + 2) * U * np.abs(g64).sum(0),
    )
    for got, want, bound in zip(fast, exact, bounds):
        err = np.abs(got.astype(np.float64) - want)
        assert (err <= 4 * bound).all(), float((err / bound).max())


def test_gelu_kernels_touch_nothing_past_the_end_under_strict_mode():
    """gelu_fwd and gelu_bwd loop over the global arrays; the last block's tail is tested,
    so the interpreter's strict mode (which refuses any access past an array's end) runs
    them on a ragged size and gives the bits of the default mode."""
    from tilepy.interpreter import run
    from tilepy.models.kernels.gelu import gelu_bwd, gelu_fwd

    n = 1000  # not a multiple of the 1024-element block
    rng = np.random.default_rng(9)
    x, g = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    outs = []
    for strict in (False, True):
        y, c, dx = (np.full(n, np.nan, np.float32) for _ in range(3))
        run(gelu_fwd().func, {"X": x, "Y": y, "C": c}, {"n": n}, strict=strict)
        run(gelu_bwd().func, {"X": x, "C": c, "dY": g, "dX": dx}, {"n": n}, strict=strict)
        outs.append(np.concatenate([y, c, dx]))
    assert not np.isnan(outs[1]).any() and outs[0].tobytes() == outs[1].tobytes()

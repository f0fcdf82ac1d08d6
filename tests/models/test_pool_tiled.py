"""The pooling kernels for windows that tile the input (pool2d_tiled_fwd/bwd: stride =
window, no padding, sizes multiples of the window) give the general kernels' bits: values,
argmax (the first maximum, row-major; kept as its place in the window), and gradients
(+0.0 plus the one window's term), on the interpreter and on the JIT; max_pool2d /
avg_pool2d take them for such shapes."""

import numpy as np
import pytest

import tilepy
from tilepy.models import Tensor
from tilepy.models.kernels import pool as P
from tilepy.models.kernels.launch import launch
from tilepy.models.nn import functional as F


def _data(shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::5] = 0.0
    x.reshape(-1)[1::7] = -0.0
    x[0, 0, :2, :2] = -np.inf  # a window of -inf: argmax stays at its first element
    x[-1, -1, -2:, -2:] = [[np.nan, 1.0], [np.nan, np.nan]]  # NaN never wins
    x[0, -1, :2, :2] = 2.0  # ties: the first maximum
    return x


def _run(tiled: bool, kind: str, x: np.ndarray, g: np.ndarray, k: int):
    fwd, bwd = (P.pool2d_tiled_fwd, P.pool2d_tiled_bwd) if tiled else \
        (P.pool2d_fwd, P.pool2d_bwd)
    S = np.array([k, k, 0, 1] + [0] * tiled, np.int32)  # the tiled kernels': relu off
    y, arg = np.empty(g.shape, np.float32), np.zeros(g.shape, np.int32)
    gx = np.full(x.shape, np.nan, np.float32)
    launch(fwd(kind=kind, dtype="float32"), x, S, y, arg)
    launch(bwd(kind=kind, dtype="float32"), g, arg, S, gx)
    if tiled:  # its argmax is the place in the window, a*k + b: as an offset in the plane
        oh, ow = np.indices(g.shape[2:])
        arg = (oh * k + arg // k) * x.shape[3] + ow * k + arg % k
    return y.tobytes(), arg.astype(np.int32).tobytes() if kind == "max" else b"", gx.tobytes()


def _grads(x_shape, k, seed):
    n, c, h, w = x_shape
    g = np.random.default_rng(seed + 1).standard_normal((n, c, h // k, w // k))
    g = g.astype(np.float32)
    g.reshape(-1)[::3] = -0.0  # a -0.0 gradient comes back +0.0, as from pool2d_bwd
    return g


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("shape, k", [((3, 5, 6, 4), 2), ((2, 2, 6, 9), 3), ((1, 3, 4, 4), 4)])
def test_tiled_pooling_gives_the_general_kernels_bits(kind, shape, k):
    x, g = _data(shape, k), _grads(shape, k, k)
    with tilepy.backend("interp"):
        assert _run(True, kind, x, g, k) == _run(False, kind, x, g, k)


def _bwd(kind, g, arg, x_shape):
    gx = np.full(x_shape, np.nan, np.float32)
    launch(P.pool2d_tiled_bwd(kind=kind, dtype="float32"), g, arg,
           np.array([2, 2, 0, 1, 0], np.int32), gx)
    return gx.tobytes()


def test_jit_tiled_max_pool_backward_gives_the_interpreters_bits():
    # (one JIT compile here: the forward's JIT run is in the exhaustive test below)
    x, g = _data((5, 3, 8, 6), 1), _grads((5, 3, 8, 6), 2, 1)
    y, arg = np.empty(g.shape, np.float32), np.zeros(g.shape, np.int32)
    with tilepy.backend("interp"):
        launch(P.pool2d_tiled_fwd(kind="max", dtype="float32"), x,
               np.array([2, 2, 0, 1, 0], np.int32), y, arg)
        want = _bwd("max", g, arg, x.shape)
    with tilepy.backend("jit"):
        assert _bwd("max", g, arg, x.shape) == want


@pytest.mark.exhaustive  # three more JIT compiles
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_jit_tiled_pooling_gives_the_interpreters_bits(kind):
    x, g = _data((5, 3, 8, 6), 2), _grads((5, 3, 8, 6), 2, 2)
    with tilepy.backend("jit"):
        got = _run(True, kind, x, g, 2)
    with tilepy.backend("interp"):
        assert got == _run(True, kind, x, g, 2)


def test_pool_layers_take_the_tiled_kernels_only_where_windows_tile_the_input(monkeypatch):
    used = []

    def spy(kernel, *arrays):
        used.append(kernel.func.name)
        return real(kernel, *arrays)
    real = F.launch
    monkeypatch.setattr(F, "launch", spy)
    with tilepy.backend("interp"):
        for x, args in (((1, 1, 4, 4), (2,)), ((1, 1, 5, 4), (2,)), ((1, 1, 4, 4), (2, 1)),
                        ((1, 1, 4, 4), (2, 2, 1))):
            t = Tensor(np.ones(x, np.float32), requires_grad=True)
            F.max_pool2d(t, *args).sum().backward()
    assert used == ["pool2d_tiled_fwd", "pool2d_tiled_bwd"] + ["pool2d_fwd", "pool2d_bwd"] * 3

"""Short rows take narrow tiles (the transformer's LayerNorm over 64 features, its mean
over 16 tokens): the same bits as the default 256-wide tiles, on the interpreter (the
ground truth); and the ops choose them. Row broadcasts keep to one thread longer."""

import numpy as np
import pytest

import tilepy
from tilepy.kernels.reductions import row_reduce
from tilepy.models import Tensor, kops, nn
from tilepy.models.kernels import elementwise as E
from tilepy.models.kernels import launch as L
from tilepy.models.kernels import norms as N
from tilepy.models.kernels.launch import launch


def _rows(m, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n)).astype(np.float32)
    x[1] = 0.0
    x[2, : n // 2] = -0.0
    x[3] = 1e30  # a row whose variance is 0 from huge equal values
    return x


def _norm(x, g, **tiles):
    m, n = x.shape
    cfg = np.array([1e-5, 1.0], np.float32)
    xhat, mean, var, rstd = (np.empty_like(x),) + tuple(np.empty(m, np.float32)
                                                        for _ in range(3))
    launch(N.row_norm_fwd(dtype="float32", **tiles), x, cfg, xhat, mean, var, rstd)
    dx = np.empty_like(x)
    launch(N.row_norm_bwd(dtype="float32", **tiles), xhat, rstd, g, cfg, dx)
    return xhat, mean, var, rstd, dx


@pytest.mark.parametrize("n", [64, 40, 1])
@pytest.mark.parametrize("fast", [False, True])
def test_row_norm_narrow_tiles_give_the_default_tiles_bits(n, fast):
    x, g = _rows(37, n, 1), _rows(37, n, 2)
    assert N.tiles(n, fast)["block_N"] == 64
    with tilepy.backend("interp"):
        want = _norm(x, g)
        got = _norm(x, g, **N.tiles(n, fast))
    for a, b in zip(want, got):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("n", [16, 10, 1])
@pytest.mark.parametrize("kind", ["sum", "max"])
def test_row_reduce_narrow_tiles_give_the_default_tiles_bits(n, kind):
    x = _rows(45, n, 3)
    with tilepy.backend("interp"):
        want = kops.row_reduce2d(x[:, :n], kind)  # the op's choice: 32 x 16 tiles
        got = np.empty(45, np.float32)
        launch(row_reduce(kind=kind, dtype="float32", out_dtype="float32"), x, got)
    assert np.array_equal(want.view(np.uint32), got.view(np.uint32))


def test_layer_norm_and_a_mean_over_tokens_choose_the_narrow_tiles():
    kops._KERNELS.clear()
    ln = nn.LayerNorm(64)
    x = Tensor(_rows(2 * 16, 64, 4).reshape(2, 16, 64), requires_grad=True)
    with tilepy.backend("interp"):
        ln(x).mean(1).sum().backward()
        nn.functional.layer_norm(x, (64,)).sum().backward()  # no affine: the row kernels
    built = {(key[0].__name__ if hasattr(key[0], "__name__") else str(key[0]),
              dict(key[1:]).get("block_N")) for key in kops._KERNELS}
    assert ("norm_affine_fwd", 64) in built and ("norm_affine_bwd", 64) in built
    assert ("row_norm_fwd", 64) in built and ("row_norm_bwd", 64) in built
    assert ("mid_sum", None) in built  # the mean over tokens reads them in place
    with tilepy.backend("interp"):
        kops.row_reduce2d(_rows(5, 16, 4), "sum")
    assert ("row_reduce", 16) in {(getattr(key[0], "__name__", ""), dict(key[1:]).get("block_N"))
                                  for key in kops._KERNELS}


@pytest.mark.exhaustive
def test_jit_narrow_row_tiles_give_the_interpreters_bits():
    x, g = _rows(1030, 64, 5), _rows(1030, 64, 6)
    with tilepy.backend("interp"):
        want = _norm(x, g) + (kops.row_reduce2d(x[:, :16], "sum"),)
    with tilepy.backend("jit"):
        got = _norm(x, g, **N.tiles(64, False)) + (kops.row_reduce2d(x[:, :16], "sum"),)
    for a, b in zip(want, got):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def _middle(shape, axis, dtype, seed):
    x = _rows(int(np.prod(shape[:axis + 1])), int(np.prod(shape[axis + 1:])), seed)
    x[4, :3] = [np.inf, -np.inf, np.nan]
    return x.reshape(shape).astype(dtype)


def _moved_sum(x, axis):
    """The sum over `axis` as it was computed before mid_sum: moved last, row_reduce."""
    shape = x.shape[:axis] + x.shape[axis + 1:]
    return kops.row_reduce2d(kops._move_last(x, (axis,)), "sum").reshape(shape)


def test_a_sum_over_a_middle_axis_is_read_in_place_with_the_moved_rows_bits():
    """A sum (a mean over tokens) over one middle axis with 32+ elements after it runs
    mid_sum on x as it lies: the bits of row_reduce on the axis moved last (signed zeros,
    infinities, NaN; float32 and bfloat16, tiles cut at the edge), and no host copy."""
    import ml_dtypes

    from tilepy.models.kernels import record as hooks
    from tilepy.models.replay import Recording

    for shape, axis, dt in (((4, 16, 64), 1, np.float32), ((2, 3, 7, 40), 2, np.float32),
                            ((3, 9, 70), 1, ml_dtypes.bfloat16), ((5, 33, 2, 20), 1, np.float32)):
        x = _middle(shape, axis, dt, 7)
        with tilepy.backend("interp"):
            want = _moved_sum(x, axis)
            rec = Recording()
            hooks.ACTIVE.append(rec)
            try:
                got = kops.reduce(x, (axis,), "sum", False)
            finally:
                hooks.ACTIVE.remove(rec)
        assert [(s[0], s[1].func.name) for s in rec.steps] == [("launch", "mid_sum")] + \
            ([("launch", "convert")] if dt != np.float32 else [])
        assert got.dtype == x.dtype and got.tobytes() == want.tobytes()
    kops._KERNELS.clear()
    with tilepy.backend("interp"):  # fewer than 32 elements after the axis: moved, as before
        kops.reduce(_middle((3, 4, 5), 1, np.float32, 8), (1,), "sum", False)
    assert {k[0].__name__ for k in kops._KERNELS} == {"row_reduce"}


def test_jit_mid_sum_gives_the_interpreters_bits():
    x = _middle((6, 17, 70), 1, np.float32, 9)
    with tilepy.backend("interp"):
        want = kops.reduce(x, (1,), "sum", False)
    with tilepy.backend("jit"):
        got = kops.reduce(x, (1,), "sum", False)
    assert got.tobytes() == want.tobytes() and np.isnan(got).any()


def test_row_broadcast_launches_stay_on_one_thread_up_to_2_to_the_19_elements():
    kops._KERNELS.clear()
    for dt in (np.float32, np.float64):
        k = kops.kernel(E.binary_rows, dtype=np.dtype(dt))
        assert L._GRAINS[id(k)] == (k, 1 << 19)
    assert id(kops.kernel(E.binary, dtype=np.dtype(np.float32))) not in L._GRAINS

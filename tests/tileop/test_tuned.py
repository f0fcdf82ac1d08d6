"""@tile_op(tune=...): the model's tiles and their neighbours (or the user's grid) measured
by tilepy's tuner, the fastest kept and cached; in exact mode every config gives the bits the
untuned op gives (the interpreter here: the tuner compiles nothing for it)."""
# ruff: noqa: F821  (i, j are the outputs' index names: free in a tile op body by design)

import numpy as np
import pytest

import tilepy.language as T
from tests.tileop import ops
from tilepy import Tensor, tile_op
from tilepy.errors import TilepyError
from tilepy.tileop.tuned import neighbours
from tilepy.tuning import cache

M, N, K = T.symbolic("M"), T.symbolic("N"), T.symbolic("K")


@tile_op(tune=True)
def matmul(a: Tensor[M, K], b: Tensor[K, N]) -> Tensor[M, N]:
    return sum(a[i, k] * b[k, j] for k in range(K))


@tile_op(tune={"i": [32, 64], "j": [64, 256]})
def softmax(x: Tensor[M, N]) -> Tensor[M, N]:
    m = max(x[i, k] for k in range(N))
    return T.exp(x[i, j] - m) / sum(T.exp(x[i, k] - m) for k in range(N))


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "tune.sqlite"
    monkeypatch.setattr(cache, "default_path", lambda: path)
    return path


def test_the_neighbours_halve_and_double_each_tile_the_model_chose():
    assert matmul.tiles == ops.matmul.tiles == {"i": 64, "j": 64, "k": 32}
    assert neighbours(matmul) == [{}, {"i": 32}, {"i": 128}, {"j": 32}, {"j": 128},
                                  {"k": 16}, {"k": 64}]


def test_every_config_gives_the_untuned_bits_and_the_fastest_is_kept(db):
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((70, 90), (90, 100)))
    want = ops.matmul(a, b)  # the model's tiles, untuned
    got = matmul(a, b)
    r = matmul.tuned(a, b)
    assert got.tobytes() == want.tobytes() and not r.cached
    assert len(r.tried) == 7 and r.config == min(r.tried, key=lambda t: t[1])[0]
    for config, _ in r.tried:  # each measured config, run again: the same bits
        from tilepy.tileop.tuned import build

        assert build(matmul, config)(a, b).tobytes() == want.tobytes(), config
    matmul._tuned.clear()  # a new process: the cache answers, nothing is measured
    again = matmul.tuned(a, b)
    assert again.cached and again.config == r.config


def test_a_grid_tunes_a_row_kernel_with_the_same_bits(db):
    x = np.random.default_rng(4).standard_normal((40, 300)).astype(np.float32)
    r = softmax.tuned(x)
    assert [c for c, _ in r.tried] == [{"i": 32, "j": 64}, {"i": 32, "j": 256},
                                       {"i": 64, "j": 64}, {"i": 64, "j": 256}]
    assert softmax(x).tobytes() == ops.softmax(x).tobytes()


def test_tuned_on_an_untuned_op_says_how_to_tune():
    with pytest.raises(TilepyError, match="not tuned") as e:
        ops.matmul.tuned(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
    assert "tune=True" in str(e.value)

"""The backward of the ops whose other finite-difference checks use one fixed shape (norms,
softmax, attention, embeddings, dropout) against float64 central differences over shapes
that hypothesis draws (interpreter: sizes vary without compiles)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tilepy
from tests.models.gradcheck import check
from tilepy.models import nn

F = nn.functional
SIDE = st.integers(1, 4)
SEED = st.integers(0, 2**31)


def _rand(rng, *shape):
    return rng.standard_normal(shape)


@settings(max_examples=5)  # finite differences: many kernel calls each
@given(SIDE, st.integers(2, 5), SEED)
def test_norms_and_softmax(rows, cols, seed):
    rng = np.random.default_rng(seed)
    x, w, b = _rand(rng, rows, cols), _rand(rng, cols), _rand(rng, cols)
    with tilepy.backend("interp"):
        check(lambda x, w, b: F.layer_norm(x, (cols,), w, b), x, w, b)
        check(lambda x, w: F.rms_norm(x, (cols,), w), x, w)
        check(lambda x: F.softmax(x, -1), x)
        xb = _rand(rng, rows + 1, 2, cols, 1)  # at least 2 values per channel
        check(lambda x, w, b: F.batch_norm(x, np.zeros(2), np.ones(2), w, b, True), xb,
              _rand(rng, 2), _rand(rng, 2))


@settings(max_examples=5)  # finite differences: many kernel calls each
@given(st.integers(1, 2), SIDE, SIDE, st.integers(1, 3), st.booleans(), SEED)
def test_attention(batch, queries, keys, dim, causal, seed):
    rng = np.random.default_rng(seed)
    q = _rand(rng, batch, queries, dim)
    k, v = _rand(rng, batch, keys, dim), _rand(rng, batch, keys, dim)
    with tilepy.backend("interp"):
        check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
              q, k, v)


@settings(max_examples=5)  # finite differences: many kernel calls each
@given(st.integers(1, 6), SIDE, st.integers(1, 8), SEED)
def test_embeddings_and_dropout(rows, dim, count, seed):
    rng = np.random.default_rng(seed)
    w = _rand(rng, rows, dim)
    idx = rng.integers(0, rows, count)
    offsets = np.unique(np.concatenate([[0], rng.integers(0, count, 2)]))
    with tilepy.backend("interp"):
        check(lambda w: F.embedding(idx.reshape(1, -1), w), w)
        for mode in ("sum", "mean", "max"):
            check(lambda w, mode=mode: F.embedding_bag(idx, w, offsets, mode=mode), w)
        check(lambda w, p: F.embedding_bag(idx, w, offsets, "sum", p), w,
              _rand(rng, count))
        check(lambda x: F.dropout(x, 0.4, seed=seed), _rand(rng, rows, dim))

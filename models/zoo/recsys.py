"""Recommenders for click logs (tilepy.models.data.synthetic.click_logs): matrix
factorisation, P(click) = sigmoid(u . v + b_item), with user and item Embeddings and the
dot product as a product and a sum; neural collaborative filtering (an MLP over the
concatenated embeddings); a Deep & Cross Network; DLRM over embedding bags; DeepFM. `click_loss`
is the binary cross-entropy, computed as cross_entropy over the logits (0, z) so the
fused, stable softmax kernel does the work.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import Parameter, Tensor, cat, kops, nn
from tilepy.models.errors import model_error
from tilepy.models.kernels.record import astype

F = nn.functional


class MatrixFactorization(nn.Module):
    """(user, item) index arrays (N,) -> click logits (N,)."""

    def __init__(self, n_users: int, n_items: int, dim: int = 8, dtype=np.float32):
        super().__init__()
        self.user = nn.Embedding(n_users, dim, dtype=dtype)
        self.item = nn.Embedding(n_items, dim, dtype=dtype)
        self.item_bias = nn.Embedding(n_items, 1, dtype=dtype)

    def forward(self, user, item):
        dot = (self.user(user) * self.item(item)).sum(-1)
        return dot + self.item_bias(item).reshape(-1)


def matrix_factorization(n_users: int = 200, n_items: int = 100, dim: int = 8,
                         dtype=np.float32) -> MatrixFactorization:
    return MatrixFactorization(n_users, n_items, dim, dtype)


def click_loss(logit: Tensor, label) -> Tensor:
    """Mean binary cross-entropy of logits (N,) against 0/1 labels: softmax cross-entropy
    of the two logits (0, z), which equals log(1 + e^z) - label * z."""
    z = logit.reshape(-1, 1)
    two = cat([Tensor(kops.zeros(z.shape, z.dtype)), z], dim=1)
    return F.cross_entropy(two, astype(np.asarray(label), np.dtype(np.int32)))


class NeuralCF(nn.Module):
    """Neural collaborative filtering: user and item embeddings concatenated, an MLP
    (Linear + ReLU layers) to one click logit. (user, item) (N,) -> logits (N,)."""

    def __init__(self, n_users: int, n_items: int, dim: int = 8, hidden: int = 32,
                 dtype=np.float32):
        super().__init__()
        self.user = nn.Embedding(n_users, dim, dtype=dtype)
        self.item = nn.Embedding(n_items, dim, dtype=dtype)
        self.mlp = nn.Sequential(nn.Linear(2 * dim, hidden, dtype=dtype), nn.ReLU(),
                                 nn.Linear(hidden, hidden, dtype=dtype), nn.ReLU(),
                                 nn.Linear(hidden, 1, dtype=dtype))

    def forward(self, user, item):
        return self.mlp(cat([self.user(user), self.item(item)], dim=1)).reshape(-1)


def neural_cf(n_users: int = 200, n_items: int = 100, dim: int = 8, hidden: int = 32,
              dtype=np.float32) -> NeuralCF:
    return NeuralCF(n_users, n_items, dim, hidden, dtype)


class CrossLayer(nn.Module):
    """DCN's cross layer: x0 * (x w + b) + x, an explicit feature interaction per layer."""

    def __init__(self, width: int, dtype=np.float32):
        super().__init__()
        self.lin = nn.Linear(width, 1, dtype=dtype)

    def forward(self, x0, x):
        return x0 * self.lin(x) + x


class DeepCross(nn.Module):
    """Deep & Cross Network: user and item embeddings concatenated into x0, `crosses`
    cross layers in parallel with an MLP, both outputs concatenated into a Linear to one
    click logit. (user, item) (N,) -> logits (N,)."""

    def __init__(self, n_users: int, n_items: int, dim: int = 8, crosses: int = 2,
                 hidden: int = 32, dtype=np.float32):
        super().__init__()
        self.user = nn.Embedding(n_users, dim, dtype=dtype)
        self.item = nn.Embedding(n_items, dim, dtype=dtype)
        self.crosses = nn.Sequential(*[CrossLayer(2 * dim, dtype) for _ in range(crosses)])
        self.deep = nn.Sequential(nn.Linear(2 * dim, hidden, dtype=dtype), nn.ReLU())
        self.out = nn.Linear(2 * dim + hidden, 1, dtype=dtype)

    def forward(self, user, item):
        x0 = cat([self.user(user), self.item(item)], dim=1)
        x = x0
        for layer in self.crosses.children():
            x = layer(x0, x)
        return self.out(cat([x, self.deep(x0)], dim=1)).reshape(-1)


def deep_cross(n_users: int = 200, n_items: int = 100, dim: int = 8, crosses: int = 2,
               hidden: int = 32, dtype=np.float32) -> DeepCross:
    return DeepCross(n_users, n_items, dim, crosses, hidden, dtype)


class DLRM(nn.Module):
    """DLRM (Naumov et al. 2019): each sparse feature is a bag of ids pooled by an
    EmbeddingBag (sum), dense features go through a bottom MLP to the same width, every
    pair of these vectors meets in a dot product, and a top MLP maps the dense vector and
    the dots to one click logit. With no dense features the pooled vectors themselves
    join the dots. forward(bags, dense=None): bags is one (N, size) id array per table."""

    def __init__(self, tables, dim: int = 8, n_dense: int = 0, hidden: int = 32,
                 dtype=np.float32):
        super().__init__()
        self.bags = nn.Sequential(*[nn.EmbeddingBag(n, dim, mode="sum", dtype=dtype)
                                    for n in tables])
        self.bottom = nn.Sequential(nn.Linear(n_dense, dim, dtype=dtype), nn.ReLU()) \
            if n_dense else None
        f = len(tables) + (1 if n_dense else 0)
        upper = [(i, j) for i in range(f) for j in range(i + 1, f)]
        pick = np.zeros((f * f, len(upper)), dtype)  # the strict upper triangle's dots
        for k, (i, j) in enumerate(upper):
            pick[i * f + j, k] = 1.0
        self.pick = pick
        width = len(upper) + (dim if n_dense else len(tables) * dim)
        self.top = nn.Sequential(nn.Linear(width, hidden, dtype=dtype), nn.ReLU(),
                                 nn.Linear(hidden, 1, dtype=dtype))

    def forward(self, bags, dense=None):
        vecs = [bag(ids) for bag, ids in zip(self.bags.children(), bags)]
        if self.bottom is not None:
            vecs = [self.bottom(dense)] + vecs
        n, d = vecs[0].shape
        z = cat([v.reshape(n, 1, d) for v in vecs], dim=1)  # (N, F, d)
        dots = F.bmm(z, z.permute((0, 2, 1))).reshape(n, -1) @ Tensor(self.pick)
        first = vecs[0] if self.bottom is not None else cat(vecs, dim=1)
        return self.top(cat([first, dots], dim=1)).reshape(-1)


def dlrm(tables=(200, 100, 100), dim: int = 8, n_dense: int = 0, hidden: int = 32,
         dtype=np.float32) -> DLRM:
    return DLRM(tables, dim, n_dense, hidden, dtype)


class DeepFM(nn.Module):
    """DeepFM (Guo et al. 2017): one categorical id per field; the logit is a bias, plus
    each field's first-order weight, plus the factorisation machine's pairwise term
    sum_{f<g} <v_f, v_g> = 0.5 * sum_d ((sum_f v_fd)^2 - sum_f v_fd^2), plus an MLP over
    the concatenated embeddings v_f (shared with the FM part). forward(fields: one (N,) id
    array per field) -> (N,) logits."""

    def __init__(self, fields=(200, 100), dim: int = 8, hidden: int = 32,
                 dtype=np.float32):
        super().__init__()
        self.embed = nn.Sequential(*[nn.Embedding(n, dim, dtype=dtype) for n in fields])
        self.first = nn.Sequential(*[nn.Embedding(n, 1, dtype=dtype) for n in fields])
        self.bias = Parameter(np.zeros((1,), dtype))
        self.deep = nn.Sequential(nn.Linear(len(fields) * dim, hidden, dtype=dtype),
                                  nn.ReLU(), nn.Linear(hidden, hidden, dtype=dtype),
                                  nn.ReLU(), nn.Linear(hidden, 1, dtype=dtype))

    def forward(self, fields):
        if len(fields) != len(self.embed):
            raise model_error(f"DeepFM: expected {len(self.embed)} id arrays (one per "
                              f"field); got {len(fields)}")
        vs = [e(ids) for e, ids in zip(self.embed.children(), fields)]
        n, d = vs[0].shape
        v = cat([x.reshape(n, 1, d) for x in vs], dim=1)  # (N, F, d)
        s = v.sum(1)
        fm = (s * s - (v * v).sum(1)).sum(1) * 0.5
        first = cat([w(ids) for w, ids in zip(self.first.children(), fields)], dim=1).sum(1)
        deep = self.deep(v.reshape(n, -1)).reshape(-1)
        return fm + first + deep + self.bias


def deepfm(fields=(200, 100), dim: int = 8, hidden: int = 32, dtype=np.float32) -> DeepFM:
    return DeepFM(fields, dim, hidden, dtype)

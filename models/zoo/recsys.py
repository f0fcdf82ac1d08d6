"""Recommenders for click logs (tilepy.models.data.synthetic.click_logs): matrix
factorisation, P(click) = sigmoid(u . v + b_item), with user and item Embeddings and the
dot product as a product and a sum; neural collaborative filtering (an MLP over the
concatenated embeddings); a Deep & Cross Network. `click_loss` is the binary cross-entropy,
computed as cross_entropy over the logits (0, z) so the fused, stable softmax kernel does
the work.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import Tensor, cat, nn

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
    two = cat([Tensor(np.zeros(z.shape, z.dtype)), z], dim=1)
    return F.cross_entropy(two, np.asarray(label).astype(np.int32))


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

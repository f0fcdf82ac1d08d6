"""A graph convolutional network (Kipf and Welling) for node classification on
tilepy.models.data.synthetic.random_graph: each layer is A_hat @ (H W), with
A_hat = D^-1/2 (A + I) D^-1/2 the normalised adjacency (a constant, made once in numpy).
"""

from __future__ import annotations

import numpy as np

from tilepy.models import Tensor, nn
from tilepy.models.zoo.checks import expect_shape


def normalized_adjacency(adj: np.ndarray, dtype=np.float32) -> np.ndarray:
    """D^-1/2 (A + I) D^-1/2 for a symmetric (n, n) adjacency without self loops."""
    a = np.asarray(adj, np.float64) + np.eye(len(adj))
    d = 1.0 / np.sqrt(a.sum(axis=1))
    return (d[:, None] * a * d[None, :]).astype(dtype)


class GCN(nn.Module):
    """forward(a_hat, features (n, f)) -> (n, classes) logits: ReLU between layers,
    Dropout on the hidden features."""

    def __init__(self, in_features: int = 16, hidden: int = 16, classes: int = 3,
                 dropout: float = 0.5, dtype=np.float32):
        super().__init__()
        self.lin1 = nn.Linear(in_features, hidden, dtype=dtype)
        self.lin2 = nn.Linear(hidden, classes, dtype=dtype)
        self.relu, self.drop = nn.ReLU(), nn.Dropout(dropout)

    def forward(self, a_hat, x):
        a = a_hat if isinstance(a_hat, Tensor) else Tensor(a_hat)
        n = len(x)
        expect_shape("GCN adjacency", a, (n, n),
                     hint="a_hat is (nodes, nodes) for features of shape (nodes, features)")
        h = self.drop(self.relu(a @ self.lin1(x)))
        return a @ self.lin2(h)


def gcn(in_features: int = 16, hidden: int = 16, classes: int = 3, dropout: float = 0.5,
        dtype=np.float32) -> GCN:
    return GCN(in_features, hidden, classes, dropout, dtype)

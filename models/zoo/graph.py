"""Graph networks for node classification on tilepy.models.data.synthetic.random_graph:
a GCN (Kipf and Welling; each layer A_hat @ (H W), A_hat = D^-1/2 (A + I) D^-1/2) and
GraphSAGE with the mean aggregator; the normalised adjacencies are constants made once in
numpy.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import Tensor, cat, nn
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


def mean_adjacency(adj: np.ndarray, dtype=np.float32) -> np.ndarray:
    """D^-1 A: row i averages node i's neighbours (a row of zeros for an isolated node)."""
    a = np.asarray(adj, np.float64)
    deg = a.sum(axis=1, keepdims=True)
    return (a / np.where(deg > 0, deg, 1.0)).astype(dtype)


class GraphSAGE(nn.Module):
    """GraphSAGE with the mean aggregator: each layer is
    Linear(cat(h, mean of the neighbours' h)), ReLU between the two layers.
    forward(a_mean (n, n) from mean_adjacency, features (n, f)) -> (n, classes)."""

    def __init__(self, in_features: int = 16, hidden: int = 16, classes: int = 3,
                 dtype=np.float32):
        super().__init__()
        self.lin1 = nn.Linear(2 * in_features, hidden, dtype=dtype)
        self.lin2 = nn.Linear(2 * hidden, classes, dtype=dtype)

    def forward(self, a_mean, x):
        a = a_mean if isinstance(a_mean, Tensor) else Tensor(a_mean)
        x = x if isinstance(x, Tensor) else Tensor(x)
        expect_shape("GraphSAGE adjacency", a, (len(x), len(x)),
                     hint="a_mean is (nodes, nodes) for features of shape (nodes, features)")
        h = self.lin1(cat([x, a @ x], dim=1)).relu()
        return self.lin2(cat([h, a @ h], dim=1))


def graphsage(in_features: int = 16, hidden: int = 16, classes: int = 3,
              dtype=np.float32) -> GraphSAGE:
    return GraphSAGE(in_features, hidden, classes, dtype)

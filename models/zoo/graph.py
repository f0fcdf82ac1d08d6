"""Graph networks for node classification on tilepy.models.data.synthetic.random_graph:
a GCN (Kipf and Welling; each layer A_hat @ (H W), A_hat = D^-1/2 (A + I) D^-1/2) and
GraphSAGE with the mean aggregator; a graph attention network (GAT) on a masked dense
score matrix. The normalised adjacencies and masks are constants made once in numpy.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import Parameter, Tensor, cat, nn
from tilepy.models.nn import init
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


def attention_mask(adj: np.ndarray, dtype=np.float32) -> np.ndarray:
    """0 where node i may attend to node j (an edge, or j = i), -1e9 elsewhere: added to
    the attention scores, it leaves only the neighbourhood in the softmax."""
    a = (np.asarray(adj) != 0) | np.eye(len(adj), dtype=bool)
    return np.where(a, 0.0, -1e9).astype(dtype)


class GATLayer(nn.Module):
    """One graph attention layer (Velickovic et al. 2018), dense: per head, scores
    e_ij = LeakyReLU(a_src . W h_i + a_dst . W h_j) over the masked neighbourhood, softmax
    over j, dropout on the weights, then the weighted sum of W h_j; heads concatenated
    (or averaged: concat=False)."""

    def __init__(self, in_features: int, out_features: int, heads: int = 2,
                 concat: bool = True, dropout: float = 0.0, dtype=np.float32):
        super().__init__()
        self.heads, self.out_features, self.concat = heads, out_features, concat
        self.lin = nn.Linear(in_features, heads * out_features, bias=False, dtype=dtype)
        bound = np.sqrt(6.0 / (out_features + 1))  # Glorot, as the reference
        self.att_src = Parameter(init.uniform((heads, out_features, 1), bound, dtype))
        self.att_dst = Parameter(init.uniform((heads, out_features, 1), bound, dtype))
        self.drop = nn.Dropout(dropout)

    def forward(self, mask: Tensor, x):
        wx, f = self.lin(x), self.out_features
        outs = []
        for k in range(self.heads):
            wh = wx[:, k * f:(k + 1) * f]
            e = (wh @ self.att_src[k]) + (wh @ self.att_dst[k]).T
            e = e.relu() - 0.2 * (-e).relu()  # LeakyReLU, slope 0.2
            outs.append(self.drop(nn.functional.softmax(e + mask)) @ wh)
        if self.concat:
            return cat(outs, dim=1)
        total = outs[0]
        for o in outs[1:]:
            total = total + o
        return total * (1.0 / self.heads)


class GAT(nn.Module):
    """forward(mask from attention_mask, features (n, f)) -> (n, classes): a multi-head
    GAT layer with ELU replaced by ReLU, then a one-head output layer; dropout on the
    features and the attention weights."""

    def __init__(self, in_features: int = 16, hidden: int = 8, classes: int = 3,
                 heads: int = 2, dropout: float = 0.2, dtype=np.float32):
        super().__init__()
        self.layer1 = GATLayer(in_features, hidden, heads, True, dropout, dtype)
        self.layer2 = GATLayer(hidden * heads, classes, 1, False, dropout, dtype)
        self.drop = nn.Dropout(dropout)

    def forward(self, mask, x):
        m = mask if isinstance(mask, Tensor) else Tensor(mask)
        expect_shape("GAT mask", m, (len(x), len(x)),
                     hint="the mask is (nodes, nodes) for features of shape (nodes, features)")
        h = self.layer1(m, self.drop(x)).relu()
        return self.layer2(m, self.drop(h))


def gat(in_features: int = 16, hidden: int = 8, classes: int = 3, heads: int = 2,
        dropout: float = 0.2, dtype=np.float32) -> GAT:
    return GAT(in_features, hidden, classes, heads, dropout, dtype)

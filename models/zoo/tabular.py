"""Classifiers for tabular features (scikit-learn's iris, wine, breast cancer): softmax
regression, the linear baseline; a residual MLP whose blocks are pre-norm (LayerNorm,
Linear, GELU, Dropout, Linear) with the block's input added back; Wide & Deep.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import nn


def softmax_regression(in_features: int = 4, classes: int = 3,
                       dtype=np.float32) -> nn.Linear:
    """Multinomial logistic regression: one Linear layer; train it with cross_entropy."""
    return nn.Linear(in_features, classes, dtype=dtype)


class ResidualBlock(nn.Module):
    """x + Linear(Dropout(GELU(Linear(LayerNorm(x))))), hidden width `hidden`."""

    def __init__(self, width: int, hidden: int, dropout: float = 0.1, dtype=np.float32):
        super().__init__()
        self.norm = nn.LayerNorm(width, dtype=dtype)
        self.mlp = nn.Sequential(nn.Linear(width, hidden, dtype=dtype), nn.GELU(),
                                 nn.Dropout(dropout), nn.Linear(hidden, width, dtype=dtype))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


def residual_mlp(in_features: int = 13, classes: int = 3, width: int = 32, blocks: int = 2,
                 dropout: float = 0.1, dtype=np.float32) -> nn.Sequential:
    """A Linear to `width`, `blocks` residual blocks, a final LayerNorm and a Linear head."""
    return nn.Sequential(
        nn.Linear(in_features, width, dtype=dtype),
        *[ResidualBlock(width, 2 * width, dropout, dtype) for _ in range(blocks)],
        nn.LayerNorm(width, dtype=dtype), nn.Linear(width, classes, dtype=dtype))


class WideDeep(nn.Module):
    """Wide & Deep: a linear model of the raw features (wide) plus an MLP (deep), their
    logits summed."""

    def __init__(self, in_features: int = 30, classes: int = 2, hidden=(32, 16),
                 dtype=np.float32):
        super().__init__()
        self.wide = nn.Linear(in_features, classes, dtype=dtype)
        layers, width = [], in_features
        for h in hidden:
            layers += [nn.Linear(width, h, dtype=dtype), nn.ReLU()]
            width = h
        self.deep = nn.Sequential(*layers, nn.Linear(width, classes, dtype=dtype))

    def forward(self, x):
        return self.wide(x) + self.deep(x)


def wide_deep(in_features: int = 30, classes: int = 2, hidden=(32, 16),
              dtype=np.float32) -> WideDeep:
    return WideDeep(in_features, classes, hidden, dtype)

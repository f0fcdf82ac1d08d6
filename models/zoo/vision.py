"""Image classifiers: an MLP and LeNet-5.

`lenet5` keeps LeNet-5's shape (conv, pool, conv, pool, three fully connected layers of
120, 84 and `classes`) adapted to small inputs such as scikit-learn's 8x8 digits: both
convolutions are 5x5 with padding 2 (the image keeps its size: 8x8 -> 4x4 -> 2x2 after
the pools), and ReLU with max pooling replace the original tanh with average pooling.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import nn


def mlp(in_features: int = 64, hidden=(256, 256), classes: int = 10,
        dtype=np.float32) -> nn.Sequential:
    """Linear + ReLU for each hidden width, then a Linear to `classes` logits."""
    layers, width = [], in_features
    for h in hidden:
        layers += [nn.Linear(width, h, dtype=dtype), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, classes, dtype=dtype))


def lenet5(in_channels: int = 1, image: int = 8, classes: int = 10,
           dtype=np.float32) -> nn.Sequential:
    """LeNet-5 for (N, in_channels, image, image) inputs (image divisible by 4)."""
    flat = 16 * (image // 4) ** 2
    return nn.Sequential(
        nn.Conv2d(in_channels, 6, 5, padding=2, dtype=dtype), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5, padding=2, dtype=dtype), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(flat, 120, dtype=dtype), nn.ReLU(),
        nn.Linear(120, 84, dtype=dtype), nn.ReLU(),
        nn.Linear(84, classes, dtype=dtype))

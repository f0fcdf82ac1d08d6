"""A PointNet-style classifier of point sets: a shared MLP applied to every point (a
Linear on the last dimension), max pooling over the points (Tensor.max, so the result does
not depend on the points' order), an MLP head."""

from __future__ import annotations

import numpy as np

from tilepy.models import nn
from tilepy.models.zoo.checks import expect_shape


class PointNet(nn.Module):
    """(N, points, dims) coordinates -> (N, classes) logits."""

    def __init__(self, dims: int = 2, classes: int = 3, width: int = 32, dtype=np.float32):
        super().__init__()
        self.dims = dims
        self.point_mlp = nn.Sequential(nn.Linear(dims, width, dtype=dtype), nn.ReLU(),
                                       nn.Linear(width, 2 * width, dtype=dtype), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(2 * width, width, dtype=dtype), nn.ReLU(),
                                  nn.Linear(width, classes, dtype=dtype))

    def forward(self, points):
        expect_shape("PointNet", points, (None, None, self.dims))
        return self.head(self.point_mlp(points).max(1))


def pointnet(dims: int = 2, classes: int = 3, width: int = 32, dtype=np.float32) -> PointNet:
    return PointNet(dims, classes, width, dtype)

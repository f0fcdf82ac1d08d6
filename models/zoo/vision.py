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


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 conv + batch-norm layers, the input added back (through
    a strided 1x1 conv + batch norm when the shape changes), then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int = 1, dtype=np.float32):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False, dtype=dtype)
        self.bn1 = nn.BatchNorm2d(cout, dtype=dtype)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False, dtype=dtype)
        self.bn2 = nn.BatchNorm2d(cout, dtype=dtype)
        self.relu = nn.ReLU()
        same = stride == 1 and cin == cout
        self.shortcut = None if same else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride=stride, bias=False, dtype=dtype),
            nn.BatchNorm2d(cout, dtype=dtype))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        skip = x if self.shortcut is None else self.shortcut(x)
        return self.relu(out + skip)


def resnet8(in_channels: int = 3, image: int = 32, classes: int = 10, width: int = 16,
            dtype=np.float32) -> nn.Sequential:
    """ResNet-8 (the CIFAR ResNet with one basic block per stage): a 3x3 conv stem, three
    stages of widths width, 2*width, 4*width (the last two halve the image), global
    average pooling and a Linear to `classes` (image divisible by 4)."""
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1, bias=False, dtype=dtype),
        nn.BatchNorm2d(width, dtype=dtype), nn.ReLU(),
        BasicBlock(width, width, 1, dtype), BasicBlock(width, 2 * width, 2, dtype),
        BasicBlock(2 * width, 4 * width, 2, dtype),
        nn.AvgPool2d(image // 4), nn.Flatten(),
        nn.Linear(4 * width, classes, dtype=dtype))


def _separable(cin: int, cout: int, stride: int, dtype) -> list:
    """A depthwise 3x3 conv (groups=cin) and a pointwise 1x1 conv, each with batch norm
    and ReLU."""
    return [nn.Conv2d(cin, cin, 3, stride=stride, padding=1, groups=cin, bias=False,
                      dtype=dtype), nn.BatchNorm2d(cin, dtype=dtype), nn.ReLU(),
            nn.Conv2d(cin, cout, 1, bias=False, dtype=dtype), nn.BatchNorm2d(cout, dtype=dtype),
            nn.ReLU()]


def mobilenet_tiny(in_channels: int = 3, image: int = 32, classes: int = 10, width: int = 8,
                   dtype=np.float32) -> nn.Sequential:
    """A MobileNet-style CNN: a 3x3 conv stem, three depthwise-separable blocks (the last
    two stride 2, doubling the width), global average pooling, a Linear head (image
    divisible by 4)."""
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1, bias=False, dtype=dtype),
        nn.BatchNorm2d(width, dtype=dtype), nn.ReLU(),
        *_separable(width, width, 1, dtype), *_separable(width, 2 * width, 2, dtype),
        *_separable(2 * width, 4 * width, 2, dtype),
        nn.AvgPool2d(image // 4), nn.Flatten(), nn.Linear(4 * width, classes, dtype=dtype))

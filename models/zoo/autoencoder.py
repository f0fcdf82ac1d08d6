"""A fully connected autoencoder (for 8x8 digits: 64 -> 32 -> 8 -> 32 -> 64) and the
mean squared error it is trained with, composed of Tensor ops (sub, mul, mean)."""

from __future__ import annotations

import numpy as np

from tilepy.models import Tensor, nn


def mse_loss(pred: Tensor, target) -> Tensor:
    """mean((pred - target)^2) over every element."""
    d = pred - target
    return (d * d).mean()


class AutoEncoder(nn.Module):
    """encoder: Linear+ReLU layers down to `code` features; decoder: the mirror image,
    ending in a Linear (no output activation: inputs are standardised)."""

    def __init__(self, in_features: int = 64, hidden: int = 32, code: int = 8,
                 dtype=np.float32):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(in_features, hidden, dtype=dtype), nn.ReLU(),
                                     nn.Linear(hidden, code, dtype=dtype))
        self.decoder = nn.Sequential(nn.Linear(code, hidden, dtype=dtype), nn.ReLU(),
                                     nn.Linear(hidden, in_features, dtype=dtype))

    def forward(self, x):
        return self.decoder(self.encoder(x))


def autoencoder(in_features: int = 64, hidden: int = 32, code: int = 8,
                dtype=np.float32) -> AutoEncoder:
    return AutoEncoder(in_features, hidden, code, dtype)

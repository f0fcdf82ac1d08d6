"""A fully connected autoencoder (for 8x8 digits: 64 -> 32 -> 8 -> 32 -> 64) and the
mean squared error it is trained with, composed of Tensor ops (sub, mul, mean)."""

from __future__ import annotations

import numpy as np

from tilepy.models import Tensor, nn
from tilepy.models.kernels.record import filled
from tilepy.models.nn import init


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


class VAE(nn.Module):
    """Variational autoencoder: the encoder gives a mean and a log-variance of `code`
    Gaussians, z = mean + exp(logvar / 2) * eps (eps ~ N(0, 1) from nn.manual_seed's
    generator while training; z = mean in eval mode), the decoder maps z back.
    forward(x) -> (reconstruction, mean, logvar)."""

    def __init__(self, in_features: int = 64, hidden: int = 32, code: int = 4,
                 dtype=np.float32):
        super().__init__()
        self.code = code
        self.encoder = nn.Sequential(nn.Linear(in_features, hidden, dtype=dtype), nn.ReLU(),
                                     nn.Linear(hidden, 2 * code, dtype=dtype))
        self.decoder = nn.Sequential(nn.Linear(code, hidden, dtype=dtype), nn.ReLU(),
                                     nn.Linear(hidden, in_features, dtype=dtype))

    def forward(self, x):
        h = self.encoder(x)
        mean, logvar = h[:, :self.code], h[:, self.code:]
        z = mean
        if self.training:
            eps = filled(init.fill_normal, np.empty(mean.shape, mean.dtype))  # drawn on replay
            z = mean + (logvar * 0.5).exp() * Tensor(eps)
        return self.decoder(z), mean, logvar


def vae_loss(recon: Tensor, x, mean: Tensor, logvar: Tensor, beta: float = 1.0) -> Tensor:
    """Per sample: the squared error summed over features plus beta times the KL
    divergence from N(0, 1), -1/2 sum(1 + logvar - mean^2 - exp(logvar)); batch mean."""
    d = recon - x
    kl = (1.0 + logvar - mean * mean - logvar.exp()).sum(1) * -0.5
    return ((d * d).sum(1) + kl * beta).mean()


def vae(in_features: int = 64, hidden: int = 32, code: int = 4, dtype=np.float32) -> VAE:
    return VAE(in_features, hidden, code, dtype)


class ConvAutoEncoder(nn.Module):
    """A convolutional autoencoder for (N, C, H, W) images (H, W divisible by 4): two
    conv + ReLU + 2x2 max-pool steps down, two nearest-neighbour upsampling + conv steps
    up, a final 3x3 conv back to C channels."""

    def __init__(self, in_channels: int = 1, width: int = 4, dtype=np.float32):
        super().__init__()
        w = width
        self.enc1 = nn.Conv2d(in_channels, w, 3, padding=1, dtype=dtype)
        self.enc2 = nn.Conv2d(w, 2 * w, 3, padding=1, dtype=dtype)
        self.dec2 = nn.Conv2d(2 * w, w, 3, padding=1, dtype=dtype)
        self.dec1 = nn.Conv2d(w, in_channels, 3, padding=1, dtype=dtype)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        from tilepy.models.zoo.dense import upsample2

        h = self.pool(self.enc1(x).relu())
        h = self.pool(self.enc2(h).relu())
        h = self.dec2(upsample2(h)).relu()
        return self.dec1(upsample2(h))


def conv_autoencoder(in_channels: int = 1, width: int = 4,
                     dtype=np.float32) -> ConvAutoEncoder:
    return ConvAutoEncoder(in_channels, width, dtype)

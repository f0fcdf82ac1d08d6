"""CNNs whose layers join feature maps by concatenation along the channels (tilepy.models
.cat): a small DenseNet classifier and a small U-Net for per-pixel segmentation, whose
decoder upsamples by nearest neighbour (a reshape and a broadcast add, no kernel of its
own) and concatenates the encoder's maps of the same size.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import Tensor, cat, nn
from tilepy.models import kops as K
from tilepy.models.zoo.checks import expect_shape


def _conv_bn_relu(cin: int, cout: int, dtype) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False, dtype=dtype),
                         nn.BatchNorm2d(cout, dtype=dtype), nn.ReLU())


class DenseLayer(nn.Module):
    """BN, ReLU, 3x3 conv to `growth` channels, concatenated after the input's channels."""

    def __init__(self, cin: int, growth: int, dtype=np.float32):
        super().__init__()
        self.f = nn.Sequential(nn.BatchNorm2d(cin, dtype=dtype), nn.ReLU(),
                               nn.Conv2d(cin, growth, 3, padding=1, bias=False, dtype=dtype))

    def forward(self, x):
        return cat([x, self.f(x)], dim=1)


def densenet_tiny(in_channels: int = 3, image: int = 32, classes: int = 10, growth: int = 4,
                  layers: int = 3, dtype=np.float32) -> nn.Sequential:
    """A 3x3 stem of 2*growth channels, two dense blocks of `layers` layers with a
    transition (BN, ReLU, 1x1 conv halving the channels, 2x2 average pooling) between,
    BN, ReLU, global average pooling and a Linear head (image even)."""
    width, parts = 2 * growth, []
    parts.append(nn.Conv2d(in_channels, width, 3, padding=1, bias=False, dtype=dtype))
    for block in range(2):
        for _ in range(layers):
            parts.append(DenseLayer(width, growth, dtype))
            width += growth
        if block == 0:
            parts += [nn.BatchNorm2d(width, dtype=dtype), nn.ReLU(),
                      nn.Conv2d(width, width // 2, 1, bias=False, dtype=dtype),
                      nn.AvgPool2d(2)]
            width //= 2
    return nn.Sequential(*parts, nn.BatchNorm2d(width, dtype=dtype), nn.ReLU(),
                         nn.AvgPool2d(image // 2), nn.Flatten(),
                         nn.Linear(width, classes, dtype=dtype))


def upsample2(x: Tensor) -> Tensor:
    """Nearest-neighbour 2x upsampling of (N, C, H, W): each pixel becomes a 2x2 block
    (a broadcast add of cached zeros, so a captured step reads the same array each time)."""
    n, c, h, w = x.shape
    spread = x.reshape(n, c, h, 1, w, 1) + Tensor(K.zeros((n, c, h, 2, w, 2), x.dtype))
    return spread.reshape(n, c, 2 * h, 2 * w)


class UNet(nn.Module):
    """Two down steps (conv block, 2x2 max pool), a bottleneck, two up steps (upsample,
    concatenate the encoder's maps, conv block), a 1x1 conv to per-pixel class logits.
    (N, C, H, W) -> (N, classes, H, W); H and W divisible by 4."""

    def __init__(self, in_channels: int = 3, classes: int = 2, width: int = 8,
                 dtype=np.float32):
        super().__init__()
        self.in_channels, w = in_channels, width
        self.down1 = _conv_bn_relu(in_channels, w, dtype)
        self.down2 = _conv_bn_relu(w, 2 * w, dtype)
        self.bottom = _conv_bn_relu(2 * w, 4 * w, dtype)
        self.up2, self.up1 = _conv_bn_relu(6 * w, 2 * w, dtype), _conv_bn_relu(3 * w, w, dtype)
        self.pool = nn.MaxPool2d(2)
        self.out = nn.Conv2d(w, classes, 1, dtype=dtype)

    def forward(self, x):
        expect_shape("UNet", x, (None, self.in_channels, None, None))
        e1 = self.down1(x)
        e2 = self.down2(self.pool(e1))
        b = self.bottom(self.pool(e2))
        d2 = self.up2(cat([upsample2(b), e2], dim=1))
        return self.out(self.up1(cat([upsample2(d2), e1], dim=1)))


def unet_tiny(in_channels: int = 3, classes: int = 2, width: int = 8,
              dtype=np.float32) -> UNet:
    return UNet(in_channels, classes, width, dtype)

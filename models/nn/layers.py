"""The layers of tilepy.models.nn (PyTorch's names, arguments, layouts and default
initialisation): Linear, Conv2d, pooling, Flatten, activations. Parameters are drawn from
the generator of `tilepy.models.nn.init` (seed it with manual_seed for reproducible runs).
"""

from __future__ import annotations

import numpy as np

from tilepy.models.errors import model_error
from tilepy.models.nn import functional as F
from tilepy.models.nn import init
from tilepy.models.nn.module import Module, as_input
from tilepy.models.tensor import Parameter


class Linear(Module):
    """y = x @ W.T + b, W of shape (out_features, in_features)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 dtype=np.float32):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / np.sqrt(in_features)
        self.weight = Parameter(init.uniform((out_features, in_features), bound, dtype))
        self.bias = Parameter(init.uniform((out_features,), bound, dtype)) if bias else None

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")

    def forward(self, x):
        x = as_input(self, x, self.weight.dtype)
        return F.linear(x, self.weight, self.bias, who=self)

    def fused_forward(self, x, following: list):
        """In a Sequential: this layer and a GELU after it as one op, F.linear_gelu (the
        bias add and GELU in one launch; same values and gradients): (its output, 2
        modules taken), else None."""
        if not following or type(following[0]) is not GELU or self.bias is None:
            return None
        self.note_call()
        following[0].note_call()
        x = as_input(self, x, self.weight.dtype)
        return F.linear_gelu(x, self.weight, self.bias, who=self), 2


class Conv2d(Module):
    """2-d convolution over NCHW input (square kernel, stride and padding; groups)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1,
                 padding=0, groups: int = 1, bias: bool = True, dtype=np.float32):
        super().__init__()
        k = F._pair(kernel_size, "kernel_size")
        if in_channels % groups or out_channels % groups:
            raise model_error(f"Conv2d: groups={groups} must divide in_channels="
                              f"{in_channels} and out_channels={out_channels}")
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, k
        self.stride, self.padding, self.groups = stride, padding, groups
        bound = 1.0 / np.sqrt(in_channels // groups * k * k)
        shape = (out_channels, in_channels // groups, k, k)
        self.weight = Parameter(init.uniform(shape, bound, dtype))
        self.bias = Parameter(init.uniform((out_channels,), bound, dtype)) if bias else None

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, groups={self.groups}")

    def forward(self, x):
        x = as_input(self, x, self.weight.dtype)
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.groups,
                        who=self)

    def fused_forward(self, x, following: list):
        """In a Sequential: this conv, a ReLU and a MaxPool2d whose stride is its window
        (no padding) as one op, F.conv2d_relu_maxpool (same values and gradients, fewer
        launches): (its output, 3 modules taken), else None."""
        if (len(following) < 2 or self.groups != 1 or type(following[0]) is not ReLU
                or type(following[1]) is not MaxPool2d):
            return None
        pool = following[1]
        if pool.padding != 0 or pool.stride not in (None, pool.kernel_size):
            return None
        for m in (self, *following[:2]):
            m.note_call()
        x = as_input(self, x, self.weight.dtype)
        return F.conv2d_relu_maxpool(x, self.weight, self.bias, self.stride, self.padding,
                                     pool.kernel_size, who=self), 3


class _Pool(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, "
                f"padding={self.padding}")


class MaxPool2d(_Pool):
    def forward(self, x):
        return F._pool("max", x, self.kernel_size, self.stride, self.padding, self)


class AvgPool2d(_Pool):
    def __init__(self, kernel_size, stride=None, padding=0, count_include_pad: bool = True):
        super().__init__(kernel_size, stride, padding)
        self.count_include_pad = count_include_pad

    def forward(self, x):
        return F._pool("avg", x, self.kernel_size, self.stride, self.padding, self,
                       self.count_include_pad)


class Flatten(Module):
    def __init__(self, start_dim: int = 1):
        super().__init__()
        self.start_dim = start_dim

    def forward(self, x):
        return F.flatten(x, self.start_dim)


def _activation(name: str, fn):
    cls = type(name, (Module,), {"forward": lambda self, x: fn(x),
                                 "__doc__": f"The {name} activation (one kernel each way)."})
    return cls


ReLU = _activation("ReLU", F.relu)
GELU = _activation("GELU", F.gelu)
SiLU = _activation("SiLU", F.silu)
Tanh = _activation("Tanh", F.tanh)
Sigmoid = _activation("Sigmoid", F.sigmoid)


def _shape(normalized_shape) -> tuple:
    return (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)


class LayerNorm(Module):
    """Normalise over the last dims `normalized_shape`, then weight * x + bias."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 dtype=np.float32):
        super().__init__()
        self.normalized_shape, self.eps = _shape(normalized_shape), eps
        affine = elementwise_affine
        self.weight = Parameter(np.ones(self.normalized_shape, dtype)) if affine else None
        self.bias = Parameter(np.zeros(self.normalized_shape, dtype)) if affine else None
        self.dtype = np.dtype(dtype)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"

    def forward(self, x):
        x = as_input(self, x, self.dtype)
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps,
                            who=self)


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) over the last dims, times weight."""

    def __init__(self, normalized_shape, eps: float = 1e-6, elementwise_affine: bool = True,
                 dtype=np.float32):
        super().__init__()
        self.normalized_shape, self.eps = _shape(normalized_shape), eps
        self.weight = (Parameter(np.ones(self.normalized_shape, dtype))
                       if elementwise_affine else None)
        self.dtype = np.dtype(dtype)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"

    def forward(self, x):
        x = as_input(self, x, self.dtype)
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps, who=self)


class BatchNorm2d(Module):
    """Per-channel normalisation of NCHW input with running statistics (buffers
    running_mean, running_var, saved in the state_dict)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = True, dtype=np.float32):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.weight = Parameter(np.ones(num_features, dtype)) if affine else None
        self.bias = Parameter(np.zeros(num_features, dtype)) if affine else None
        self.register_buffer("running_mean", np.zeros(num_features, dtype))
        self.register_buffer("running_var", np.ones(num_features, dtype))
        self.dtype = np.dtype(dtype)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"

    def forward(self, x):
        x = as_input(self, x, self.dtype)
        if x.ndim != 4:
            raise model_error(f"{self!r}: expected input of shape (N, {self.num_features}, "
                              f"H, W); got {x.shape}")
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training, self.momentum, self.eps, who=self)


class Embedding(Module):
    """A lookup table: integer indices of any shape -> rows of weight (num, dim)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype=np.float32):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(init.normal((num_embeddings, embedding_dim), dtype))

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"

    def forward(self, idx):
        return F.embedding(idx, self.weight, who=self)


class EmbeddingBag(Module):
    """Bags of rows of weight (num, dim) reduced by sum, mean or max (torch's arguments:
    2-d (bags, size) input, or 1-d input with offsets; per_sample_weights in sum mode)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, mode: str = "mean",
                 include_last_offset: bool = False, dtype=np.float32):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.mode, self.include_last_offset = mode, include_last_offset
        self.weight = Parameter(init.normal((num_embeddings, embedding_dim), dtype))

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}"

    def forward(self, input, offsets=None, per_sample_weights=None):
        return F.embedding_bag(input, self.weight, offsets, self.mode, per_sample_weights,
                               self.include_last_offset, who=self)


class Dropout(Module):
    """Zero elements with probability p while training (a counter-based, seeded mask)."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        self.p = p

    def extra_repr(self) -> str:
        return f"p={self.p}"

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

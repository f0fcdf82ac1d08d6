"""The array type of tilepy.models: a numpy array with an optional gradient and the graph
node that produced it.

`Tensor.data` is the value (a numpy array, owned by the tensor), `Tensor.grad` its gradient
(an array of the same shape, or None before any backward pass). `Parameter` is a Tensor
that a module owns and an optimiser updates in place. Operators dispatch to models/ops.py,
whose every forward and backward computes with a tile kernel.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import autograd
from tilepy.models.errors import model_error
from tilepy.models.kernels import record as hooks


def floating(dtype) -> bool:
    """numpy's floats and bfloat16 (ml_dtypes' bfloat16 is numpy kind 'V')."""
    return dtype.kind == "f" or dtype.name == "bfloat16"


class Tensor:
    """A value that autograd may differentiate: `data`, `grad`, `requires_grad`."""

    __array_priority__ = 1000  # numpy defers `ndarray op Tensor` to the Tensor

    def __init__(self, data, requires_grad: bool = False):
        self.data = np.asarray(data)
        self.grad = None
        self.requires_grad = bool(requires_grad)
        self._node = None
        if self.requires_grad and not floating(self.data.dtype):
            raise model_error(f"only floating-point tensors can require gradients; got "
                              f"dtype {self.data.dtype}", hint="pass x.astype(np.float32)")

    # ------------------------------------------------------------ plain properties
    @property
    def shape(self) -> tuple:
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return self.data.size

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    def numpy(self) -> np.ndarray:
        if hooks.ACTIVE:
            hooks.host_read("Tensor.numpy()")
        return self.data

    def item(self) -> float:
        if hooks.ACTIVE:
            hooks.host_read("Tensor.item()")
        return self.data.item()

    def detach(self) -> "Tensor":
        return Tensor(self.data)

    def to(self, dtype) -> "Tensor":
        """This tensor in another float dtype (differentiable; rounds to nearest even)."""
        return _ops().cast(self, dtype)

    def float(self) -> "Tensor":
        return self.to(np.float32)

    def bfloat16(self) -> "Tensor":
        import ml_dtypes

        return self.to(ml_dtypes.bfloat16)

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        extra = ""
        if self._node is not None:
            extra = f", grad_fn={self._node.name}"
        elif self.requires_grad:
            extra = ", requires_grad=True"
        return f"Tensor({self.data!r}{extra})"

    # ------------------------------------------------------------ autograd
    def backward(self, grad=None) -> None:
        """Accumulate this tensor's gradient into every leaf that requires one."""
        if not self.requires_grad:
            raise model_error("backward() on a tensor that does not require grad",
                              hint="some input must be a Parameter or requires_grad=True, "
                                   "outside no_grad()")
        if grad is None:
            if self.data.size != 1:
                raise model_error(f"backward() needs a gradient for a non-scalar tensor of "
                                  f"shape {self.shape}", hint="call loss.backward() on a "
                                  "scalar, or pass grad= of the same shape")
            grad = _seed(self.shape, self.dtype)
        grad = np.asarray(grad.data if isinstance(grad, Tensor) else grad, self.dtype)
        if grad.shape != self.shape:
            raise model_error(f"backward(): gradient shape {grad.shape} does not match the "
                              f"tensor's shape {self.shape}")
        autograd.backward(self, grad)

    def zero_grad(self) -> None:
        self.grad = None

    # ------------------------------------------------------------ operators
    def __add__(self, other):
        return _ops().add(self, other)

    def __radd__(self, other):
        return _ops().add(self, other)

    def __sub__(self, other):
        return _ops().sub(self, other)

    def __rsub__(self, other):
        return _ops().rsub(self, other)

    def __mul__(self, other):
        return _ops().mul(self, other)

    def __rmul__(self, other):
        return _ops().mul(self, other)

    def __truediv__(self, other):
        return _ops().div(self, other)

    def __rtruediv__(self, other):
        return _ops().rdiv(self, other)

    def __neg__(self):
        return _ops().neg(self)

    def __matmul__(self, other):
        return _ops().matmul(self, other)

    def __getitem__(self, index):
        return _ops().getitem(self, index)

    def reshape(self, *shape):
        return _ops().reshape(self, shape[0] if len(shape) == 1 and
                              isinstance(shape[0], (tuple, list)) else shape)

    view = reshape

    def flatten(self, start_dim: int = 0):
        return self.reshape(*self.shape[:start_dim], -1)

    def transpose(self, dim0: int = 0, dim1: int = 1):
        axes = list(range(self.ndim))
        axes[dim0], axes[dim1] = axes[dim1], axes[dim0]
        return _ops().permute(self, axes)

    def permute(self, *axes):
        return _ops().permute(self, axes[0] if len(axes) == 1 else axes)

    @property
    def T(self):  # noqa: N802 - numpy's and torch's name
        return _ops().permute(self, tuple(range(self.ndim))[::-1])

    def sum(self, dim=None, keepdim: bool = False):
        return _ops().sum(self, dim, keepdim)

    def mean(self, dim=None, keepdim: bool = False):
        return _ops().mean(self, dim, keepdim)

    def max(self, dim=None, keepdim: bool = False):
        return _ops().amax(self, dim, keepdim)

    def relu(self):
        return _ops().activation(self, "relu")

    def tanh(self):
        return _ops().activation(self, "tanh")

    def sigmoid(self):
        return _ops().activation(self, "sigmoid")

    def exp(self):
        return _ops().activation(self, "exp")

    def log(self):
        return _ops().activation(self, "log")


def _ops():
    from tilepy.models import ops  # ops builds on Tensor

    return ops


class Parameter(Tensor):
    """A Tensor owned by a module, trained by an optimiser (requires_grad by default)."""

    def __init__(self, data, requires_grad: bool = True):
        super().__init__(data, requires_grad)

    def __repr__(self) -> str:
        return f"Parameter({self.data!r})"


def _seed(shape: tuple, dtype) -> np.ndarray:
    """The gradient that starts a scalar's backward pass: ones, the same read-only array
    on every call (so a captured step reads it as an array kept across steps)."""
    from tilepy.models import kops

    return kops.const((1.0,), dtype).reshape(shape)

"""The array type of tilepy.models: a numpy array with an optional gradient.

`Tensor.data` is the value (a numpy or ml_dtypes array, owned by the tensor), `Tensor.grad`
its gradient (an array of the same shape, or None before any backward pass). `Parameter` is
a Tensor that a module owns and an optimiser updates in place.
"""

import numpy as np


class Tensor:
    """A value that autograd may differentiate: `data`, `grad`, `requires_grad`."""

    def __init__(self, data, requires_grad: bool = False):
        self.data = np.asarray(data)
        self.grad = None
        self.requires_grad = bool(requires_grad)

    @property
    def shape(self) -> tuple:
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    def numpy(self) -> np.ndarray:
        return self.data

    def __repr__(self) -> str:
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"Tensor({self.data!r}{grad})"


class Parameter(Tensor):
    """A Tensor owned by a module, trained by an optimiser (requires_grad by default)."""

    def __init__(self, data, requires_grad: bool = True):
        super().__init__(data, requires_grad)

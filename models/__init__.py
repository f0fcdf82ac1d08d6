"""tilepy.models: autograd tensors, layers, optimisers, data sets and training loops whose
every op is a tilepy kernel (being built; see docs/models.md once it exists).
"""

from tilepy.models.tensor import Parameter, Tensor

__all__ = ["Parameter", "Tensor"]
